/* `foundry chat`: an interactive conversation with a Llama 3 Instruct
 * checkpoint. Each line of standard input is a user turn; the answer is
 * streamed to standard output as it is generated and its speed follows on
 * standard error, so standard output holds only the answers. The KV cache
 * is kept across turns (foundry/chat.h), so a turn prefills only its own
 * ids.
 *
 * Signals: SIGINT is blocked in every thread but is let through while the
 * main thread generates or waits for input (pselect), so a Ctrl-C always
 * reaches the main thread there. During an answer it stops the answer and
 * keeps the conversation; at the prompt a first Ctrl-C drops the line being
 * typed and a second one in a row exits with 0, as EOF does. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include "cli_draft.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/chat.h"
#include "prompt.h"

void fdy_cmd_chat_help(FILE *out) {
  fprintf(out,
          "usage: foundry chat --model DIR [options]\n"
          "\n"
          "Talks with an Instruct MLX 4-bit checkpoint through its chat\n"
          "template (the checkpoint's own Jinja chat_template). Each line of\n"
          "standard input is a message; the answer is printed to standard\n"
          "output as it is generated, then its speed to standard error. The\n"
          "conversation stays in the KV cache, so a message costs only its\n"
          "own tokens. Ctrl-C stops an answer; Ctrl-C twice at the prompt or\n"
          "Ctrl-D (end of input) exits. A message that does not fit in the\n"
          "rest of the context is refused and the conversation goes on.\n"
          "\n"
          "options:\n"
          "  --tokenizer FILE a tokenizer.json or tiktoken file instead of\n"
          "                   the model directory's\n"
          "  --system TEXT    a system message before the first one\n"
          "  --chat-template llama3|chatml|FILE  this template, whatever\n"
          "                   the tokenizer's: Foundry's Llama 3 or ChatML,\n"
          "                   or a Jinja template file (default: the model's\n"
          "                   chat_template.jinja, else the chat_template of\n"
          "                   tokenizer_config.json)\n"
          "  --max-tokens N   tokens per answer at most (default: until the\n"
          "                   end of the answer or of the context)\n"
          "  --backend NAME   cpu (the default) or cuda\n"
          "  --threads T      cpu backend threads (default: online CPUs)\n"
          "  --context C      KV cache positions for the whole conversation\n"
          "                   (default: the model's max_position_embeddings,\n"
          "                   at most 4096)\n"
          "  --kv-dtype D     KV cache dtype: f32 (default) or f16\n");
  fdy_cli_draft_help(out);
  fdy_cli_sampling_help(out, "the temperature, top_k and top_p of the\n"
                             "                   model directory's "
                             "generation_config.json\n"
                             "                   when it has one, else "
                             "greedy");
}

/* Set by SIGINT, cleared by whoever acts on it. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

/* Lines of a file descriptor, read as they come. */
typedef struct line_reader {
  int fd;
  char *buf;
  size_t start, len, cap; /* bytes [start, len) are not handed out yet */
  bool eof;
} line_reader;

typedef enum line_result { LINE_OK, LINE_EOF, LINE_INTERRUPTED } line_result;

/* The next line, without its newline, in *line (n bytes, valid until the
 * next call); the last line may lack a newline. Waits for input in
 * pselect with wait_mask (SIGINT let through): a SIGINT while waiting
 * drops what was read of the line and gives LINE_INTERRUPTED. */
static fdy_status read_line(line_reader *r, const sigset_t *wait_mask,
                            line_result *result, const char **line, size_t *n,
                            fdy_error *err) {
  for (;;) {
    char *nl = r->len > r->start
                   ? memchr(r->buf + r->start, '\n', r->len - r->start)
                   : NULL;
    if (nl || (r->eof && r->start < r->len)) {
      size_t end = nl ? (size_t)(nl - r->buf) : r->len;
      *line = r->buf + r->start;
      *n = end - r->start;
      r->start = nl ? end + 1 : end;
      *result = LINE_OK;
      return FDY_OK;
    }
    if (r->eof) {
      *result = LINE_EOF;
      return FDY_OK;
    }
    if (interrupted) {
      interrupted = 0;
      r->start = r->len = 0;
      *result = LINE_INTERRUPTED;
      return FDY_OK;
    }
    if (r->start > 0) {
      memmove(r->buf, r->buf + r->start, r->len - r->start);
      r->len -= r->start;
      r->start = 0;
    }
    if (r->len == r->cap) {
      size_t cap = r->cap ? 2 * r->cap : 4096;
      char *grown = cap > r->cap ? realloc(r->buf, cap) : NULL;
      if (!grown) {
        return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                             "out of memory reading a line of %zu bytes",
                             r->len);
      }
      r->buf = grown;
      r->cap = cap;
    }
    fd_set in;
    FD_ZERO(&in);
    FD_SET(r->fd, &in);
    if (pselect(r->fd + 1, &in, NULL, NULL, NULL, wait_mask) < 0) {
      if (errno == EINTR) {
        continue;
      }
      return fdy_error_set(err, FDY_ERR_IO, "waiting for standard input: %s",
                           strerror(errno));
    }
    ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
    if (got < 0 && errno != EINTR && errno != EAGAIN) {
      return fdy_error_set(err, FDY_ERR_IO, "reading standard input: %s",
                           strerror(errno));
    }
    r->eof = got == 0;
    r->len += got > 0 ? (size_t)got : 0;
  }
}

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!strchr(" \t\r\n\v\f", s[i]) || s[i] == '\0') {
      return false;
    }
  }
  return true;
}

/* The line on standard error after an answer. */
static void print_answer_stats(const fdy_chat_answer *a) {
  static const char *const why[] = {
      [FDY_CHAT_STOP_EOS] = "",
      [FDY_CHAT_STOP_MAX_TOKENS] = ", --max-tokens reached",
      [FDY_CHAT_STOP_CONTEXT] = ", the context is full: start a new chat "
                                "or use a larger --context to go on",
      [FDY_CHAT_STOP_INTERRUPTED] = ", interrupted",
  };
  if (a->count > 1) {
    fprintf(stderr, "[%" PRIu32 " tokens, %.1f tokens/s", a->count,
            a->decode_tokens_per_second);
  } else {
    fprintf(stderr, "[%" PRIu32 " token", a->count);
  }
  fprintf(stderr, "; prompt %" PRIu32 " tokens, %.1f tokens/s%s]\n",
          a->prompt_tokens, a->prefill_tokens_per_second, why[a->stop]);
}

/* The conversation: one turn per line until EOF or a second Ctrl-C at the
 * prompt. A turn refused for the context is reported and skipped. spec:
 * the speculative options with a draft (its figures follow each answer's
 * line), else NULL. */
static int converse(fdy_chat *chat, fdy_cli_printer *printer,
                    const sigset_t *wait_mask, const sigset_t *sigint,
                    const fdy_llama_speculative_options *spec) {
  line_reader reader = {.fd = STDIN_FILENO};
  bool tty = isatty(STDIN_FILENO);
  bool armed = false; /* a Ctrl-C at the prompt: another one exits */
  int code = FDY_EXIT_OK;
  fdy_error err;
  if (tty) {
    fprintf(stderr, "Ctrl-C stops an answer; Ctrl-D exits.\n");
  }
  for (;;) {
    if (tty) {
      fputs("> ", stderr);
    }
    line_result result = LINE_EOF;
    const char *line = NULL;
    size_t n = 0;
    if (read_line(&reader, wait_mask, &result, &line, &n, &err) != FDY_OK) {
      code = fdy_cli_fail(&err);
      break;
    }
    if (result == LINE_EOF || (result == LINE_INTERRUPTED && armed)) {
      if (tty) {
        fputc('\n', stderr);
      }
      break;
    }
    if (result == LINE_INTERRUPTED) {
      fprintf(stderr, "\n(Ctrl-C again or Ctrl-D exits)\n");
      armed = true;
      continue;
    }
    armed = false;
    if (blank(line, n)) {
      continue;
    }
    fdy_chat_answer answer;
    pthread_sigmask(SIG_SETMASK, wait_mask, NULL);
    fdy_status st = fdy_chat_turn(chat, line, n, fdy_cli_printer_token, printer,
                                  &answer, &err);
    pthread_sigmask(SIG_BLOCK, sigint, NULL);
    if (st == FDY_ERR_CONTEXT) {
      fprintf(stderr, "foundry chat: %s\n", err.message);
      continue;
    }
    if (st != FDY_OK || fdy_cli_printer_finish(printer, &err) != FDY_OK) {
      code = fdy_cli_fail(&err);
      break;
    }
    if (ferror(stdout)) {
      code = fdy_cli_finish_stdout(FDY_EXIT_OK);
      break;
    }
    print_answer_stats(&answer);
    if (spec) {
      fdy_cli_draft_print(stderr, spec, &answer.speculative, answer.count);
    }
  }
  free(reader.buf);
  return code;
}

/* The command's options, as parsed. */
typedef struct chat_args {
  const char *model_dir;
  fdy_cli_text_flags text_flags; /* --max-tokens 0: no limit */
  fdy_cli_session_flags session;
  fdy_cli_sampling_flags sampling;
  fdy_cli_draft_flags draft;
} chat_args;

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("model", chat_args, model_dir)},
    {FDY_CLI_TEXT_ROWS(chat_args, text_flags)},
    {FDY_CLI_SESSION_ROWS(chat_args, session)},
    {FDY_CLI_SAMPLING_ROWS(chat_args, sampling)},
    {FDY_CLI_DRAFT_ROWS(chat_args, draft)},
    {FDY_CLI_END},
};

/* The flags into *a, and the checks between them: FDY_EXIT_OK or the
 * usage error printed. */
static int parse(int argc, char **argv, chat_args *a) {
  *a = (chat_args){.text_flags = {.template_kind = FDY_CHAT_TEMPLATE_AUTO},
                   .session = FDY_CLI_SESSION_FLAGS_DEFAULT,
                   .sampling = {.params = FDY_LLAMA_GREEDY}};
  int code = fdy_cli_parse_flags("chat", argc, argv, flags, a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (!a->model_dir) {
    return fdy_cli_usage("chat", "--model is required");
  }
  return fdy_cli_draft_check("chat", &a->draft);
}

/* The conversation and what it holds. */
typedef struct chat_run {
  fdy_llama_speculative_options spec; /* with --draft-model */
  fdy_sample_params sampling;
  bool from_config; /* the defaults are generation_config.json's */
  bool random_seed;
  fdy_tokenizer *tok;
  fdy_llama_model *model, *draft_model;
  fdy_backend *engine;
  fdy_llama_session *session, *draft;
  fdy_chat *chat;
  fdy_cli_printer printer;
} chat_run;

static void chat_run_close(chat_run *r) {
  fdy_cli_printer_destroy(&r->printer);
  fdy_chat_destroy(r->chat);
  fdy_llama_session_destroy(r->draft);
  fdy_llama_close(r->draft_model);
  fdy_llama_session_destroy(r->session);
  fdy_backend_destroy(r->engine);
  fdy_llama_close(r->model);
  fdy_tokenizer_destroy(r->tok);
}

/* The tokenizer, the model, the draft, the backend and the sessions
 * (ids_only unless logits). */
static fdy_status open_models(const chat_args *a, bool logits, chat_run *r,
                              fdy_error *err) {
  const fdy_cli_session_flags *f = &a->session;
  fdy_status st = fdy_cli_open_tokenizer(a->model_dir, a->text_flags.tokenizer,
                                         &r->tok, err);
  if (st == FDY_OK) {
    st = fdy_llama_open(a->model_dir, &r->model, err);
  }
  if (st == FDY_OK && a->draft.dir) {
    st = fdy_cli_open_draft(a->draft.dir, r->model, &r->draft_model, err);
  }
  if (st == FDY_OK) {
    st = fdy_cli_backend_create(f->backend, (uint32_t)f->threads,
                                f->serial_launch, &r->engine, err);
  }
  fdy_llama_session_options o = {
      .backend = r->engine,
      .context = (uint32_t)f->context,
      .kv_dtype = f->kv_dtype,
      .step_rows = a->draft.dir ? r->spec.max_draft_tokens + 1 : 0,
      .ids_only = !logits};
  if (st == FDY_OK) {
    st = fdy_llama_session_create(r->model, &o, &r->session, err);
  }
  if (st == FDY_OK && a->draft.dir) {
    st = fdy_cli_draft_session(f, r->draft_model, r->engine,
                               fdy_llama_session_context(r->session), logits,
                               &r->draft, err);
  }
  return st;
}

/* The sampling (the model's generation_config.json, else greedy, under the
 * flags), the models and the conversation with its printer. */
static fdy_status open_chat(const chat_args *a, chat_run *r, fdy_error *err) {
  fdy_sample_params defaults = FDY_LLAMA_GREEDY;
  r->spec = fdy_cli_draft_speculative(&a->draft);
  fdy_status st =
      fdy_cli_generation_config(a->model_dir, &defaults, &r->from_config, err);
  if (st != FDY_OK) {
    return st;
  }
  r->sampling =
      fdy_cli_sampling_resolve(&a->sampling, defaults, &r->random_seed);
  /* generation reads the ids alone, but speculative sampling the logits */
  st = open_models(
      a, a->draft.dir && fdy_llama_speculative_needs_logits(&r->sampling), r,
      err);
  if (st != FDY_OK) {
    return st;
  }
  fdy_chat_options o = {.system = a->text_flags.system,
                        .max_tokens = (uint32_t)a->text_flags.max_tokens,
                        .sampling = &r->sampling,
                        .template_kind = a->text_flags.template_kind,
                        .template_file = a->text_flags.template_file,
                        .speculative = a->draft.dir ? &r->spec : NULL,
                        .draft = r->draft};
  st = fdy_chat_create(r->session, r->tok, &o, &r->chat, err);
  if (st == FDY_OK) {
    st = fdy_cli_printer_init(&r->printer, r->tok, stdout, &interrupted, err);
  }
  if (st != FDY_OK) {
    fdy_cli_explain_template(err);
  }
  return st;
}

int fdy_cmd_chat(int argc, char **argv) {
  chat_args a;
  int code = parse(argc, argv, &a);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  /* Threads started from here on (the backend's) block SIGINT. A Ctrl-C
   * while loading stays pending and ends the process (default action) when
   * the main thread lets it through after loading. */
  sigset_t sigint, original, wait_mask;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigint, &original);
  wait_mask = original;
  sigdelset(&wait_mask, SIGINT);
  struct sigaction previous;
  bool handled = false;
  chat_run r = {0};
  fdy_error err;
  if (open_chat(&a, &r, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (r.from_config || r.sampling.temperature > 0.0f) {
    fdy_cli_sampling_print(stderr, &r.sampling, r.random_seed,
                           r.from_config ? "generation_config.json" : NULL);
  }
  pthread_sigmask(SIG_SETMASK, &original, NULL); /* a pending Ctrl-C ends */
  struct sigaction action = {.sa_handler = on_interrupt};
  sigemptyset(&action.sa_mask);
  pthread_sigmask(SIG_BLOCK, &sigint, NULL);
  sigaction(SIGINT, &action, &previous);
  handled = true;
  code = converse(r.chat, &r.printer, &wait_mask, &sigint,
                  r.draft ? &r.spec : NULL);

cleanup:
  if (handled) {
    sigaction(SIGINT, &previous, NULL);
  }
  pthread_sigmask(SIG_SETMASK, &original, NULL);
  chat_run_close(&r);
  return code;
}

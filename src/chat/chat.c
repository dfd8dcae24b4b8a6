/* Chat conversations (see chat.h) in the Llama 3 Instruct or the ChatML
 * template: the template's special ids are resolved once from the
 * tokenizer; a turn builds its ids (the end of the previous answer, the
 * user message, the assistant header), checks them
 * against what is left of the context and generates the answer after what
 * the session already holds. The last id of an answer is returned but not
 * fed, so it is kept as `pending` and fed at the start of the next turn. */
#include "foundry/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fdy_chat {
  fdy_llama_session *session;
  fdy_tokenizer *tok;
  char *system; /* NULL for none */
  uint32_t max_tokens;
  fdy_sample_params sampling;
  fdy_chat_template kind; /* LLAMA3 or CHATML */
  /* Llama 3: BOS, <|start_header_id|>, <|end_header_id|> and <|eot_id|>;
   * ChatML: bos -1, start_header <|im_start|>, eot <|im_end|> */
  int32_t bos, start_header, end_header, eot;
  int32_t stop[FDY_CHAT_MAX_STOP];
  uint32_t stop_count;
  bool started;      /* a turn has been prefilled */
  int32_t pending;   /* the previous answer's last id, never fed */
  bool pending_stop; /* it is a stop id: the end of turn replaces it */
};

/* ---- recognising the template ------------------------------------------ */

/* Other template families, named in the error. */
static const struct {
  const char *marker;
  const char *name;
} known_templates[] = {
    {"[INST]", "Llama 2 / Mistral ([INST])"},
    {"<start_of_turn>", "Gemma (<start_of_turn>)"},
    {"<|user|>", "Zephyr / Phi-3 (<|user|>)"},
};

static bool is_llama3_template(const char *t) {
  return strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>") &&
         strstr(t, "<|eot_id|>");
}

/* ChatML: every message framed by <|im_start|> and <|im_end|> (SmolLM2,
 * Qwen2.5, Qwen3 and the like), with no Llama 3 header. */
static bool is_chatml_template(const char *t) {
  return strstr(t, "<|im_start|>") && strstr(t, "<|im_end|>") &&
         !strstr(t, "<|start_header_id|>");
}

/* The system message a ChatML template writes when the conversation has
 * none (SmolLM2's "You are a helpful AI assistant named SmolLM ...",
 * Qwen2.5's "You are Qwen ..."): the first "<|im_start|>system" followed by
 * a newline (or Jinja's \n) and literal text up to "<|im_end|>", with no
 * quote, brace or backslash in it (which would mean an expression). A
 * malloc'd copy in *out, or NULL when the template has none. */
static fdy_status chatml_default_system(const char *t, char **out,
                                        fdy_error *err) {
  static const char marker[] = "<|im_start|>system";
  *out = NULL;
  for (const char *p = strstr(t, marker); p; p = strstr(p + 1, marker)) {
    const char *q = p + sizeof marker - 1;
    if (*q == '\n') {
      q++;
    } else if (q[0] == '\\' && q[1] == 'n') {
      q += 2;
    } else {
      continue;
    }
    const char *end = strstr(q, "<|im_end|>");
    if (!end || end == q) {
      continue;
    }
    size_t n = (size_t)(end - q);
    if (memchr(q, '\'', n) || memchr(q, '"', n) || memchr(q, '{', n) ||
        memchr(q, '}', n) || memchr(q, '\\', n)) {
      continue;
    }
    if (!(*out = strndup(q, n))) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return FDY_OK;
  }
  return FDY_OK;
}

static fdy_status unsupported_template(const fdy_tokenizer *tok, const char *t,
                                       fdy_error *err) {
  const char *kind = "an unknown template";
  for (size_t i = 0; i < sizeof known_templates / sizeof known_templates[0];
       i++) {
    if (strstr(t, known_templates[i].marker)) {
      kind = known_templates[i].name;
      break;
    }
  }
  /* its start, printable ASCII only */
  char start[49];
  size_t n = 0;
  for (; t[n] && n + 1 < sizeof start; n++) {
    unsigned char c = (unsigned char)t[n];
    start[n] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  start[n] = '\0';
  /* the tokenizer_config.json beside the tokenizer's file, which
   * fdy_tokenizer_open reads */
  const char *source = fdy_tokenizer_source(tok);
  const char *slash = strrchr(source, '/');
  int dir_len = slash ? (int)(slash - source + 1) : 0;
  fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                "%.*stokenizer_config.json: its chat_template is %s, neither "
                "the Llama 3 Instruct template (<|start_header_id|>ROLE"
                "<|end_header_id|> ... <|eot_id|>) nor ChatML (<|im_start|>"
                "ROLE ... <|im_end|>), the ones Foundry applies; it starts "
                "'%s%s'",
                dir_len, source, kind, start, t[n] ? "..." : "");
  if (err) {
    snprintf(err->name, sizeof err->name, "chat_template");
  }
  return FDY_ERR_UNSUPPORTED;
}

static fdy_status special(const fdy_tokenizer *tok, fdy_chat_template kind,
                          const char *spelling, int32_t *out, fdy_error *err) {
  *out = fdy_tokenizer_special_id(tok, spelling);
  if (*out >= 0) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                "%s: the tokenizer has no %s, which the %s chat template "
                "needs",
                fdy_tokenizer_source(tok), spelling,
                kind == FDY_CHAT_TEMPLATE_CHATML ? "ChatML" : "Llama 3");
  if (err) {
    snprintf(err->name, sizeof err->name, "%s", spelling);
  }
  return FDY_ERR_UNSUPPORTED;
}

fdy_status fdy_chat_create(fdy_llama_session *session, fdy_tokenizer *tok,
                           const fdy_chat_options *options, fdy_chat **out,
                           fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_create needs an output pointer");
  }
  *out = NULL;
  if (!session || !tok) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_create needs a session and a tokenizer");
  }
  if (options && options->sampling) {
    fdy_status s = fdy_llama_sampling_check(options->sampling, err);
    if (s != FDY_OK) {
      return s;
    }
  }
  /* the template: forced, else the tokenizer's, else the one whose
   * special tokens the tokenizer has */
  const char *t = fdy_tokenizer_chat_template(tok);
  fdy_chat_template kind =
      options ? options->template_kind : FDY_CHAT_TEMPLATE_AUTO;
  if (kind != FDY_CHAT_TEMPLATE_AUTO && kind != FDY_CHAT_TEMPLATE_LLAMA3 &&
      kind != FDY_CHAT_TEMPLATE_CHATML) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "unknown chat template kind %d", (int)kind);
  }
  if (kind == FDY_CHAT_TEMPLATE_AUTO && t) {
    if (is_llama3_template(t)) {
      kind = FDY_CHAT_TEMPLATE_LLAMA3;
    } else if (is_chatml_template(t)) {
      kind = FDY_CHAT_TEMPLATE_CHATML;
    } else {
      return unsupported_template(tok, t, err);
    }
  }
  if (kind == FDY_CHAT_TEMPLATE_AUTO) {
    kind = fdy_tokenizer_special_id(tok, "<|start_header_id|>") < 0 &&
                   fdy_tokenizer_special_id(tok, "<|im_start|>") >= 0
               ? FDY_CHAT_TEMPLATE_CHATML
               : FDY_CHAT_TEMPLATE_LLAMA3;
  }
  fdy_chat *chat = calloc(1, sizeof *chat);
  if (!chat) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  chat->session = session;
  chat->tok = tok;
  chat->kind = kind;
  chat->max_tokens = options ? options->max_tokens : 0;
  chat->sampling =
      options && options->sampling ? *options->sampling : FDY_LLAMA_GREEDY;
  chat->pending = -1;
  fdy_status s = FDY_OK;
  if (kind == FDY_CHAT_TEMPLATE_LLAMA3) {
    chat->bos = fdy_tokenizer_bos(tok);
    if (chat->bos < 0) {
      s = special(tok, kind, "<|begin_of_text|>", &chat->bos, err);
    }
    if (s == FDY_OK) {
      s = special(tok, kind, "<|start_header_id|>", &chat->start_header, err);
    }
    if (s == FDY_OK) {
      s = special(tok, kind, "<|end_header_id|>", &chat->end_header, err);
    }
    if (s == FDY_OK) {
      s = special(tok, kind, "<|eot_id|>", &chat->eot, err);
    }
  } else {
    chat->bos = chat->end_header = -1; /* ChatML writes no BOS */
    s = special(tok, kind, "<|im_start|>", &chat->start_header, err);
    if (s == FDY_OK) {
      s = special(tok, kind, "<|im_end|>", &chat->eot, err);
    }
  }
  if (s == FDY_OK && options && options->system &&
      !(chat->system = strdup(options->system))) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (s == FDY_OK && kind == FDY_CHAT_TEMPLATE_CHATML && t &&
      !(options && options->system)) {
    s = chatml_default_system(t, &chat->system, err);
  }
  if (s != FDY_OK) {
    fdy_chat_destroy(chat);
    return s;
  }
  /* the tokenizer's stop ids and the template's end of turn */
  chat->stop_count = fdy_tokenizer_stop_ids(tok, chat->stop);
  bool listed = false;
  for (uint32_t i = 0; i < chat->stop_count; i++) {
    listed = listed || chat->stop[i] == chat->eot;
  }
  if (!listed) {
    chat->stop[chat->stop_count++] = chat->eot;
  }
  *out = chat;
  return FDY_OK;
}

void fdy_chat_destroy(fdy_chat *chat) {
  if (chat) {
    free(chat->system);
    free(chat);
  }
}

fdy_chat_template fdy_chat_template_kind(const fdy_chat *chat) {
  return chat ? chat->kind : FDY_CHAT_TEMPLATE_AUTO;
}

uint32_t fdy_chat_stop_ids(const fdy_chat *chat,
                           int32_t ids[FDY_CHAT_MAX_STOP]) {
  uint32_t n = chat ? chat->stop_count : 0;
  if (n) {
    memcpy(ids, chat->stop, n * sizeof *ids);
  }
  return n;
}

/* ---- the template ------------------------------------------------------- */

/* Python's str.isspace() characters in UTF-8 (what Jinja's trim strips),
 * besides ASCII 0x09-0x0d, 0x1c-0x1f and space. */
static const char *const unicode_spaces[] = {
    "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80",
    "\xe2\x80\x81", "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84",
    "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
    "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9",
    "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};

/* Bytes of the whitespace character at the start (at_end false) or the end
 * of the n bytes at p; 0 when there is none. */
static size_t space_bytes(const char *p, size_t n, bool at_end) {
  if (n == 0) {
    return 0;
  }
  unsigned char c = (unsigned char)(at_end ? p[n - 1] : p[0]);
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) {
    return 1;
  }
  for (size_t i = 0; i < sizeof unicode_spaces / sizeof unicode_spaces[0];
       i++) {
    size_t k = strlen(unicode_spaces[i]);
    if (k <= n && memcmp(at_end ? p + n - k : p, unicode_spaces[i], k) == 0) {
      return k;
    }
  }
  return 0;
}

/* <|start_header_id|>ROLE<|end_header_id|>, then "\n\n" + text stripped,
 * and <|eot_id|> when text is not NULL (a message, not the answer's
 * header). */
/* ChatML: <|im_start|>, then ROLE "\n" TEXT as one piece of text (not
 * stripped: the templates write content as it is), then <|im_end|> "\n"
 * when text is not NULL (a message, not the answer's header). */
static fdy_status append_chatml(fdy_chat *chat, const char *role,
                                const char *text, size_t len, fdy_tokens *out,
                                fdy_error *err) {
  fdy_status s = fdy_tokens_push(out, chat->start_header, err);
  if (s != FDY_OK) {
    return s;
  }
  size_t role_len = strlen(role);
  char *body = malloc(role_len + 1 + len);
  if (!body) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(body, role, role_len);
  body[role_len] = '\n';
  if (len) {
    memcpy(body + role_len + 1, text, len);
  }
  s = fdy_tokenizer_encode(chat->tok, body, role_len + 1 + len, 0, out, err);
  free(body);
  if (s == FDY_OK && text) {
    s = fdy_tokens_push(out, chat->eot, err);
  }
  if (s == FDY_OK && text) {
    s = fdy_tokenizer_encode(chat->tok, "\n", 1, 0, out, err);
  }
  return s;
}

static fdy_status append_message(fdy_chat *chat, const char *role,
                                 const char *text, size_t len, fdy_tokens *out,
                                 fdy_error *err) {
  if (chat->kind == FDY_CHAT_TEMPLATE_CHATML) {
    return append_chatml(chat, role, text, len, out, err);
  }
  fdy_status s = fdy_tokens_push(out, chat->start_header, err);
  if (s == FDY_OK) {
    s = fdy_tokenizer_encode(chat->tok, role, strlen(role), 0, out, err);
  }
  if (s == FDY_OK) {
    s = fdy_tokens_push(out, chat->end_header, err);
  }
  if (s != FDY_OK) {
    return s;
  }
  size_t k;
  while (text && (k = space_bytes(text, len, false)) > 0) {
    text += k;
    len -= k;
  }
  while (text && (k = space_bytes(text, len, true)) > 0) {
    len -= k;
  }
  /* one piece of text as the template renders it, "\n\n" included */
  char *body = malloc(len + 2);
  if (!body) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(body, "\n\n", 2);
  if (len) {
    memcpy(body + 2, text, len);
  }
  s = fdy_tokenizer_encode(chat->tok, body, len + 2, 0, out, err);
  free(body);
  if (s == FDY_OK && text) {
    s = fdy_tokens_push(out, chat->eot, err);
  }
  return s;
}

fdy_status fdy_chat_prompt(fdy_chat *chat, const char *text, size_t len,
                           fdy_tokens *out, fdy_error *err) {
  if (!chat || !out || (!text && len)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_prompt needs a chat, text and an output");
  }
  size_t before = out->count;
  fdy_status s = FDY_OK;
  if (!chat->started) {
    if (chat->bos >= 0) {
      s = fdy_tokens_push(out, chat->bos, err);
    }
    if (s == FDY_OK && chat->system) {
      s = append_message(chat, "system", chat->system, strlen(chat->system),
                         out, err);
    }
  } else {
    if (chat->pending >= 0 && !chat->pending_stop) {
      s = fdy_tokens_push(out, chat->pending, err);
    }
    if (s == FDY_OK) {
      s = fdy_tokens_push(out, chat->eot, err);
    }
    if (s == FDY_OK && chat->kind == FDY_CHAT_TEMPLATE_CHATML) {
      s = fdy_tokenizer_encode(chat->tok, "\n", 1, 0, out, err);
    }
  }
  if (s == FDY_OK) {
    s = append_message(chat, "user", text ? text : "", len, out, err);
  }
  if (s == FDY_OK) {
    s = append_message(chat, "assistant", NULL, 0, out, err);
  }
  if (s != FDY_OK) {
    out->count = before;
  }
  return s;
}

/* ---- turns -------------------------------------------------------------- */

fdy_status fdy_chat_turn(fdy_chat *chat, const char *text, size_t len,
                         fdy_llama_token_fn on_token, void *ctx,
                         fdy_chat_answer *out, fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_turn needs an output");
  }
  memset(out, 0, sizeof *out);
  fdy_tokens ids = {0};
  fdy_status s = fdy_chat_prompt(chat, text, len, &ids, err);
  if (s != FDY_OK) {
    return s;
  }
  uint32_t context = fdy_llama_session_context(chat->session);
  uint64_t used = chat->started ? fdy_llama_session_position(chat->session) : 0;
  uint64_t needed = used + ids.count;
  if (needed > context) {
    fdy_error_set(err, FDY_ERR_CONTEXT,
                  "the conversation is too long for the context: this turn "
                  "needs %zu positions, but %llu of the context's %u are "
                  "used (%llu left); the conversation is unchanged",
                  ids.count, (unsigned long long)used, context,
                  (unsigned long long)(context - used));
    if (err) {
      err->expected = context;
      err->actual = needed;
    }
    fdy_tokens_free(&ids);
    return FDY_ERR_CONTEXT;
  }
  /* the first id costs no position, every later one one */
  uint64_t limit = context - needed + 1;
  fdy_llama_generate_options o = {.max_tokens = chat->max_tokens &&
                                                        chat->max_tokens < limit
                                                    ? chat->max_tokens
                                                    : (uint32_t)limit,
                                  .keep_context = chat->started,
                                  .stop_ids = chat->stop,
                                  .stop_count = chat->stop_count,
                                  .on_token = on_token,
                                  .ctx = ctx,
                                  .sampling = &chat->sampling};
  fdy_llama_generation gen;
  s = fdy_llama_generate(chat->session, ids.ids, (uint32_t)ids.count, &o, &gen,
                         err);
  if (s == FDY_OK) {
    chat->started = true;
    chat->pending = gen.ids[gen.count - 1];
    chat->pending_stop = gen.stopped_at_eos;
    out->prompt_tokens = (uint32_t)ids.count;
    out->count = gen.count;
    out->stop = gen.stopped_at_eos  ? FDY_CHAT_STOP_EOS
                : gen.interrupted   ? FDY_CHAT_STOP_INTERRUPTED
                : gen.count < limit ? FDY_CHAT_STOP_MAX_TOKENS
                                    : FDY_CHAT_STOP_CONTEXT;
    out->prefill_seconds = gen.prefill_seconds;
    out->decode_seconds = gen.decode_seconds;
    out->prefill_tokens_per_second = gen.prefill_tokens_per_second;
    out->decode_tokens_per_second = gen.decode_tokens_per_second;
  }
  fdy_llama_generation_free(&gen);
  fdy_tokens_free(&ids);
  return s;
}

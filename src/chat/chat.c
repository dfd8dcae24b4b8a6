/* Chat conversations (see chat.h): a Jinja template (the checkpoint's, a
 * file or one of Foundry's two) rendered for the conversation so far, its
 * text turned into ids with the special tokens the template writes, and
 * turns generated after what the session already holds. The last id of an
 * answer is returned but not fed, so it is kept as `pending` and fed at the
 * start of the next turn. A later turn renders the conversation with a
 * sentinel in place of the last answer: what follows the sentinel is what
 * the template writes after an answer up to the next generation prompt,
 * fed after the answer's own ids, as long as the rendering before the
 * sentinel extends the previous turn's prompt. */
#include "foundry/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/input.h"

#define TEMPLATE_LIMIT (16u << 20)

/* Stands for an answer in a rendering: no whitespace at its ends (which
 * `| trim` would take), nothing a template looks for in a message. */
static const char sentinel[] = "\x02"
                               "foundry-answer"
                               "\x03";
#define SENTINEL_LEN (sizeof sentinel - 1)

/* Foundry's templates, for tokenizers without one or when forced. */
static const char llama3_template[] =
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' "
    "+ message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | "
    "trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
static const char chatml_template[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + "
    "'\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if "
    "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

typedef struct special {
  const char *text; /* owned by the tokenizer */
  size_t len;
  int32_t id;
} special;

typedef struct message {
  char *role, *content;
  size_t len;
} message;

struct fdy_chat {
  fdy_llama_session *session;
  fdy_tokenizer *tok;
  uint32_t max_tokens;
  fdy_sample_params sampling;
  fdy_llama_session *draft; /* speculative decoding; NULL for none */
  fdy_llama_speculative_options speculative;
  fdy_chat_template kind;
  fdy_jinja *template;
  char *bos, *eos;   /* the tokenizer's spellings, or NULL */
  special *specials; /* the special tokens, longest first */
  size_t special_count;
  message *messages; /* the conversation: system, user, assistant, ... */
  size_t message_count, message_cap;
  int32_t stop[FDY_CHAT_MAX_STOP];
  uint32_t stop_count;
  bool started;      /* a turn has been prefilled */
  int32_t pending;   /* the previous answer's last id, never fed */
  bool pending_stop; /* it is a stop id */
};

/* ---- the tokenizer's special tokens ------------------------------------- */

static int longest_first(const void *a, const void *b) {
  const special *x = a, *y = b;
  return (x->len < y->len) - (x->len > y->len);
}

static fdy_status load_specials(fdy_chat *chat, fdy_error *err) {
  uint32_t n = fdy_tokenizer_vocab_size(chat->tok);
  for (int pass = 0; pass < 2; pass++) {
    size_t count = 0;
    for (uint32_t id = 0; id < n; id++) {
      const char *text;
      size_t len;
      if (!fdy_tokenizer_is_special(chat->tok, (int32_t)id) ||
          fdy_tokenizer_token_bytes(chat->tok, (int32_t)id, &text, &len, err) !=
              FDY_OK ||
          len == 0) {
        continue;
      }
      if (pass == 1) {
        chat->specials[count] = (special){text, len, (int32_t)id};
      }
      count++;
    }
    if (pass == 0) {
      chat->specials = calloc(count ? count : 1, sizeof *chat->specials);
      if (!chat->specials) {
        return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      }
    }
    chat->special_count = count;
  }
  qsort(chat->specials, chat->special_count, sizeof *chat->specials,
        longest_first);
  return FDY_OK;
}

/* The special token spelled at text[at] by the template's own bytes, or
 * NULL. */
static const special *special_at(const fdy_chat *chat,
                                 const fdy_jinja_output *r, size_t at) {
  if (!r->from_template[at]) {
    return NULL;
  }
  for (size_t k = 0; k < chat->special_count; k++) {
    const special *s = &chat->specials[k];
    if (s->len <= r->len - at && s->text[0] == r->text[at] &&
        memcmp(r->text + at, s->text, s->len) == 0 &&
        memchr(r->from_template + at, 0, s->len) == NULL) {
      return s;
    }
  }
  return NULL;
}

/* Appends the ids of r->text[from, to): the special tokens the template
 * writes, and the text between them as plain text. */
static fdy_status encode_rendering(fdy_chat *chat, const fdy_jinja_output *r,
                                   size_t from, size_t to, fdy_tokens *out,
                                   fdy_error *err) {
  size_t start = from;
  for (size_t at = from; at < to;) {
    const special *s = special_at(chat, r, at);
    if (!s || at + s->len > to) {
      at++;
      continue;
    }
    fdy_status st = at > start
                        ? fdy_tokenizer_encode(chat->tok, r->text + start,
                                               at - start, 0, out, err)
                        : FDY_OK;
    if (st == FDY_OK) {
      st = fdy_tokens_push(out, s->id, err);
    }
    if (st != FDY_OK) {
      return st;
    }
    at += s->len;
    start = at;
  }
  return to > start ? fdy_tokenizer_encode(chat->tok, r->text + start,
                                           to - start, 0, out, err)
                    : FDY_OK;
}

/* ---- rendering ---------------------------------------------------------- */

/* Renders the conversation plus the extra messages (role, text pairs;
 * text NULL: the sentinel). */
static fdy_status render(const fdy_chat *chat, const message *extra,
                         size_t extra_count, bool generation_prompt,
                         fdy_jinja_output *out, fdy_error *err) {
  size_t n = chat->message_count + extra_count;
  fdy_jinja_message *m = calloc(n ? n : 1, sizeof *m);
  if (!m) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t k = 0; k < n; k++) {
    const message *src = k < chat->message_count
                             ? &chat->messages[k]
                             : &extra[k - chat->message_count];
    m[k] =
        (fdy_jinja_message){src->role, src->content ? src->content : sentinel,
                            src->content ? src->len : SENTINEL_LEN};
  }
  fdy_jinja_input in = {.messages = m,
                        .message_count = n,
                        .add_generation_prompt = generation_prompt,
                        .bos_token = chat->bos,
                        .eos_token = chat->eos};
  fdy_status s = fdy_jinja_render(chat->template, &in, out, err);
  free(m);
  return s;
}

/* Where the sentinel is in the conversation's bytes of r, or r->len. */
static size_t find_sentinel(const fdy_jinja_output *r) {
  for (const char *p = r->text;
       (p = memmem(p, r->len - (size_t)(p - r->text), sentinel, SENTINEL_LEN));
       p++) {
    size_t at = (size_t)(p - r->text);
    if (memchr(r->from_template + at, 1, SENTINEL_LEN) == NULL) {
      return at;
    }
  }
  return r->len;
}

/* ---- creating a chat ------------------------------------------------------
 */

static char *spelling(const fdy_tokenizer *tok, int32_t id) {
  const char *text;
  size_t len;
  fdy_error ignored;
  if (id < 0 ||
      fdy_tokenizer_token_bytes(tok, id, &text, &len, &ignored) != FDY_OK) {
    return NULL;
  }
  return strndup(text, len);
}

/* The template's source: the file, the forced one, the checkpoint's
 * (chat_template.jinja beside the tokenizer, else tokenizer_config.json's),
 * else a default. *owned is the malloc'd source when it was read; *where
 * names it in errors. */
static fdy_status template_source(const fdy_tokenizer *tok,
                                  const fdy_chat_options *o,
                                  fdy_chat_template *kind, const char **text,
                                  size_t *len, char **owned, char *where,
                                  size_t where_cap, fdy_error *err) {
  fdy_chat_template forced = o ? o->template_kind : FDY_CHAT_TEMPLATE_AUTO;
  *owned = NULL;
  const char *file = o ? o->template_file : NULL;
  char beside[4096];
  const char *source = fdy_tokenizer_source(tok);
  const char *slash = strrchr(source, '/');
  int dir_len = slash ? (int)(slash - source + 1) : 0;
  if (!file && forced == FDY_CHAT_TEMPLATE_AUTO) {
    /* a chat_template.jinja that is there must be read (a FIFO or a
     * directory so named fails, as the tokenizer's files do) */
    snprintf(beside, sizeof beside, "%.*schat_template.jinja", dir_len, source);
    fdy_error e;
    fdy_status s =
        fdy_input_read(beside, "chat template", TEMPLATE_LIMIT, owned, len, &e);
    if (s == FDY_OK) {
      snprintf(where, where_cap, "%s", beside);
      *kind = FDY_CHAT_TEMPLATE_CHECKPOINT;
      *text = *owned;
      return FDY_OK;
    }
    if (s != FDY_ERR_NOT_FOUND) {
      if (err) {
        *err = e;
      }
      return s;
    }
  }
  if (file) {
    snprintf(where, where_cap, "%s", file);
    *kind = FDY_CHAT_TEMPLATE_FILE;
    fdy_status s =
        fdy_input_read(file, "chat template", TEMPLATE_LIMIT, owned, len, err);
    *text = *owned;
    return s;
  }
  const char *own = fdy_tokenizer_chat_template(tok);
  if (forced == FDY_CHAT_TEMPLATE_AUTO && own) {
    snprintf(where, where_cap, "%.*stokenizer_config.json", dir_len, source);
    *kind = FDY_CHAT_TEMPLATE_CHECKPOINT;
    *text = own;
    *len = strlen(own);
    return FDY_OK;
  }
  if (forced == FDY_CHAT_TEMPLATE_AUTO) {
    forced = fdy_tokenizer_special_id(tok, "<|start_header_id|>") < 0 &&
                     fdy_tokenizer_special_id(tok, "<|im_start|>") >= 0
                 ? FDY_CHAT_TEMPLATE_CHATML
                 : FDY_CHAT_TEMPLATE_LLAMA3;
  }
  if (forced != FDY_CHAT_TEMPLATE_LLAMA3 &&
      forced != FDY_CHAT_TEMPLATE_CHATML) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "template_kind must be AUTO, LLAMA3 or CHATML, got %d",
                         (int)forced);
  }
  *kind = forced;
  snprintf(where, where_cap, "Foundry's %s template",
           forced == FDY_CHAT_TEMPLATE_LLAMA3 ? "Llama 3" : "ChatML");
  *text =
      forced == FDY_CHAT_TEMPLATE_LLAMA3 ? llama3_template : chatml_template;
  *len = strlen(*text);
  return FDY_OK;
}

/* A template outside the interpreter's Jinja, or malformed: the error
 * names the file and says why. */
static fdy_status refuse_template(const char *where, fdy_error *err) {
  if (!err) {
    return FDY_ERR_UNSUPPORTED;
  }
  char why[FDY_ERROR_MESSAGE_MAX];
  snprintf(why, sizeof why, "%s", err->message);
  fdy_status kind = err->kind;
  int64_t line = err->line, column = err->column;
  fdy_error_setf(err, kind, "chat_template", 0, 0,
                 "%s: its chat template cannot be applied: %s", where, why);
  err->line = line;
  err->column = column;
  return kind;
}

/* Renders a user message and an answer (the sentinel): the special token
 * right after the answer is the template's end of turn (*eot, or -1); a
 * <|...|> spelling the template writes that is not a special token of the
 * tokenizer is refused. A template that cannot render that conversation
 * (it wants a system message first, say) tells nothing: no end of turn. */
static fdy_status probe_template(fdy_chat *chat, int32_t *eot, fdy_error *err) {
  *eot = -1;
  message m[2] = {{"user", "Hi", 2}, {"assistant", NULL, 0}};
  fdy_jinja_output r = {0};
  fdy_error ignored;
  if (render(chat, m, 2, false, &r, &ignored) != FDY_OK) {
    return FDY_OK;
  }
  size_t at = find_sentinel(&r);
  const special *s = at + SENTINEL_LEN < r.len
                         ? special_at(chat, &r, at + SENTINEL_LEN)
                         : NULL;
  if (s) {
    *eot = s->id;
  }
  fdy_status st = FDY_OK;
  for (size_t k = 0; k + 1 < r.len && st == FDY_OK; k++) {
    if (!r.from_template[k] || memcmp(r.text + k, "<|", 2) != 0 ||
        special_at(chat, &r, k)) {
      continue;
    }
    size_t end = 0; /* past the "|>" that closes the spelling */
    for (size_t j = k + 2; !end && j + 1 < r.len && j < k + 64 &&
                           r.from_template[j] && r.text[j] > ' ';
         j++) {
      end = memcmp(r.text + j, "|>", 2) == 0 ? j + 2 : 0;
    }
    if (!end) {
      continue;
    }
    int n = (int)(end - k);
    st = fdy_error_setf(err, FDY_ERR_UNSUPPORTED, NULL, 0, 0,
                        "%s: the tokenizer has no special token %.*s, which "
                        "the chat template writes",
                        fdy_tokenizer_source(chat->tok), n, r.text + k);
    if (err) {
      snprintf(err->name, sizeof err->name, "%.*s", n, r.text + k);
    }
  }
  fdy_jinja_output_free(&r);
  return st;
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
  if (options && !options->draft != !options->speculative) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_create: a draft session needs speculative "
                         "options, and speculative options a draft");
  }
  fdy_chat *chat = calloc(1, sizeof *chat);
  if (!chat) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  chat->session = session;
  chat->tok = tok;
  chat->max_tokens = options ? options->max_tokens : 0;
  chat->sampling =
      options && options->sampling ? *options->sampling : FDY_LLAMA_GREEDY;
  if (options && options->draft) {
    chat->draft = options->draft;
    chat->speculative = *options->speculative;
  }
  chat->pending = -1;
  const char *text = NULL;
  size_t len = 0;
  char *owned = NULL, where[4200];
  fdy_status s = template_source(tok, options, &chat->kind, &text, &len, &owned,
                                 where, sizeof where, err);
  if (s == FDY_OK &&
      fdy_jinja_parse(text, len, &chat->template, err) != FDY_OK) {
    s = refuse_template(where, err);
  }
  free(owned);
  int32_t bos = fdy_tokenizer_bos(tok), eos = fdy_tokenizer_eos(tok), eot = -1;
  if (s == FDY_OK && ((bos >= 0 && !(chat->bos = spelling(tok, bos))) ||
                      (eos >= 0 && !(chat->eos = spelling(tok, eos))))) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (s == FDY_OK) {
    s = load_specials(chat, err);
  }
  if (s == FDY_OK) {
    s = probe_template(chat, &eot, err);
  }
  if (s == FDY_OK && options && options->system) {
    chat->messages = calloc(1, sizeof *chat->messages);
    chat->message_cap = 1;
    if (!chat->messages || !(chat->messages[0].role = strdup("system")) ||
        !(chat->messages[0].content = strdup(options->system))) {
      s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    } else {
      chat->messages[0].len = strlen(options->system);
      chat->message_count = 1;
    }
  }
  if (s != FDY_OK) {
    fdy_chat_destroy(chat);
    return s;
  }
  /* the tokenizer's stop ids and the template's end of turn */
  chat->stop_count = fdy_tokenizer_stop_ids(tok, chat->stop);
  bool listed = eot < 0;
  for (uint32_t i = 0; i < chat->stop_count; i++) {
    listed = listed || chat->stop[i] == eot;
  }
  if (!listed) {
    chat->stop[chat->stop_count++] = eot;
  }
  *out = chat;
  return FDY_OK;
}

static void free_messages(message *m, size_t count) {
  for (size_t k = 0; k < count; k++) {
    free(m[k].role);
    free(m[k].content);
  }
}

void fdy_chat_destroy(fdy_chat *chat) {
  if (chat) {
    fdy_jinja_destroy(chat->template);
    free(chat->bos);
    free(chat->eos);
    free(chat->specials);
    free_messages(chat->messages, chat->message_count);
    free(chat->messages);
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

/* ---- a turn's ids ----------------------------------------------------------
 */

/* The ids of a turn (see fdy_chat_prompt); *fresh when they are the whole
 * conversation, to be prefilled from the session's start. */
static fdy_status turn_ids(fdy_chat *chat, const char *text, size_t len,
                           fdy_tokens *out, bool *fresh, fdy_error *err) {
  message user = {"user", (char *)(text ? text : ""), len};
  fdy_jinja_output before = {0}, after = {0};
  fdy_status s = FDY_OK;
  *fresh = !chat->started;
  if (chat->started) {
    /* the previous prompt (the conversation up to the last answer), and
     * the conversation with the sentinel for that answer and the new
     * message */
    message answered[2] = {{"assistant", NULL, 0}, user};
    chat->message_count--; /* without the last answer */
    s = render(chat, NULL, 0, true, &before, err);
    if (s == FDY_OK) {
      s = render(chat, answered, 2, true, &after, err);
    }
    chat->message_count++;
    size_t at = s == FDY_OK ? find_sentinel(&after) : 0;
    if (s == FDY_OK && at < after.len && before.len <= at &&
        memcmp(after.text, before.text, before.len) == 0) {
      if (chat->pending >= 0 && !chat->pending_stop) {
        s = fdy_tokens_push(out, chat->pending, err);
      }
      if (s == FDY_OK) {
        s = encode_rendering(chat, &after, at + SENTINEL_LEN, after.len, out,
                             err);
      }
      fdy_jinja_output_free(&before);
      fdy_jinja_output_free(&after);
      return s;
    }
    fdy_jinja_output_free(&before);
    fdy_jinja_output_free(&after);
    if (s != FDY_OK) {
      return s;
    }
    *fresh = true;
  }
  s = render(chat, &user, 1, true, &after, err);
  if (s == FDY_OK) {
    s = encode_rendering(chat, &after, 0, after.len, out, err);
  }
  fdy_jinja_output_free(&after);
  return s;
}

fdy_status fdy_chat_prompt(fdy_chat *chat, const char *text, size_t len,
                           fdy_tokens *out, fdy_error *err) {
  if (!chat || !out || (!text && len)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_prompt needs a chat, text and an output");
  }
  size_t before = out->count;
  bool fresh;
  fdy_status s = turn_ids(chat, text, len, out, &fresh, err);
  if (s != FDY_OK) {
    out->count = before;
  }
  return s;
}

/* Appends a user message and its answer, both copied, to the
 * conversation. */
static fdy_status append_exchange(fdy_chat *chat, const char *user_text,
                                  size_t user_len, const char *answer_text,
                                  size_t answer_len, fdy_error *err) {
  if (chat->message_count + 2 > chat->message_cap) {
    size_t cap = chat->message_count * 2 + 8;
    message *m = realloc(chat->messages, cap * sizeof *m);
    if (!m) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    chat->messages = m;
    chat->message_cap = cap;
  }
  message user = {strdup("user"), malloc(user_len + 1), user_len};
  message answer = {strdup("assistant"), malloc(answer_len + 1), answer_len};
  if (!user.role || !user.content || !answer.role || !answer.content) {
    free_messages((message[]){user, answer}, 2);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (user_len) {
    memcpy(user.content, user_text, user_len);
  }
  user.content[user_len] = '\0';
  if (answer_len) {
    memcpy(answer.content, answer_text, answer_len);
  }
  answer.content[answer_len] = '\0';
  chat->messages[chat->message_count++] = user;
  chat->messages[chat->message_count++] = answer;
  return FDY_OK;
}

fdy_status fdy_chat_add_exchange(fdy_chat *chat, const char *user,
                                 size_t user_len, const char *answer,
                                 size_t answer_len, fdy_error *err) {
  if (!chat || (!user && user_len) || (!answer && answer_len)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_add_exchange needs a chat and texts");
  }
  if (chat->started) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_add_exchange: the chat has started; "
                         "earlier exchanges go before the first turn");
  }
  return append_exchange(chat, user ? user : "", user_len, answer ? answer : "",
                         answer_len, err);
}

/* Appends the user message and the answer (the text of its ids, without a
 * final stop id) to the conversation. */
static fdy_status remember(fdy_chat *chat, const char *text, size_t len,
                           const fdy_llama_generation *gen, fdy_error *err) {
  /* ids past the tokenizer's (a model's padded vocabulary) have no text */
  size_t count = gen->count - (gen->stopped_at_eos ? 1 : 0), n = 0;
  int32_t *ids = malloc((count ? count : 1) * sizeof *ids);
  if (!ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  uint32_t vocab = fdy_tokenizer_vocab_size(chat->tok);
  for (size_t k = 0; k < count; k++) {
    if (gen->ids[k] >= 0 && (uint32_t)gen->ids[k] < vocab) {
      ids[n++] = gen->ids[k];
    }
  }
  char *answer = NULL;
  size_t answer_len = 0;
  fdy_status s =
      fdy_tokenizer_decode(chat->tok, ids, n, &answer, &answer_len, err);
  free(ids);
  if (s == FDY_OK) {
    s = append_exchange(chat, text ? text : "", len, answer, answer_len, err);
  }
  free(answer);
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
  if (!chat || (!text && len)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_chat_turn needs a chat and text");
  }
  fdy_tokens ids = {0};
  bool fresh;
  fdy_status s = turn_ids(chat, text, len, &ids, &fresh, err);
  if (s != FDY_OK) {
    fdy_tokens_free(&ids);
    return s;
  }
  uint32_t context = fdy_llama_session_context(chat->session);
  uint64_t used = fresh ? 0 : fdy_llama_session_position(chat->session);
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
                                  .keep_context = !fresh,
                                  .stop_ids = chat->stop,
                                  .stop_count = chat->stop_count,
                                  .on_token = on_token,
                                  .ctx = ctx,
                                  .sampling = &chat->sampling};
  fdy_llama_generation gen;
  s = chat->draft ? fdy_llama_generate_speculative(chat->session, chat->draft,
                                                   ids.ids, (uint32_t)ids.count,
                                                   &o, &chat->speculative, &gen,
                                                   &out->speculative, err)
                  : fdy_llama_generate(chat->session, ids.ids,
                                       (uint32_t)ids.count, &o, &gen, err);
  if (s == FDY_OK && (s = remember(chat, text, len, &gen, err)) != FDY_OK) {
    chat->started = false; /* the next turn starts afresh without this one */
  }
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

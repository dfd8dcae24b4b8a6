/* Llama 3 Instruct conversations (see chat.h): the template's special ids
 * are resolved once from the tokenizer; a turn builds its ids (the end of
 * the previous answer, the user message, the assistant header), checks them
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
  int32_t bos, start_header, end_header, eot;
  int32_t stop[FDY_TOKENIZER_MAX_STOP];
  uint32_t stop_count;
  bool started;      /* a turn has been prefilled */
  int32_t pending;   /* the previous answer's last id, never fed */
  bool pending_stop; /* it is a stop id: <|eot_id|> replaces it */
};

/* ---- recognising the template ------------------------------------------ */

/* Other template families, named in the error. */
static const struct {
  const char *marker;
  const char *name;
} known_templates[] = {
    {"<|im_start|>", "ChatML (<|im_start|>)"},
    {"[INST]", "Llama 2 / Mistral ([INST])"},
    {"<start_of_turn>", "Gemma (<start_of_turn>)"},
    {"<|user|>", "Zephyr / Phi-3 (<|user|>)"},
};

static bool is_llama3_template(const char *t) {
  return strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>") &&
         strstr(t, "<|eot_id|>");
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
  fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                "%s: the chat template of its tokenizer_config.json is %s, "
                "not the Llama 3 Instruct template (<|start_header_id|>ROLE"
                "<|end_header_id|> ... <|eot_id|>), the only one Foundry "
                "applies; it starts '%s%s'",
                fdy_tokenizer_source(tok), kind, start, t[n] ? "..." : "");
  if (err) {
    snprintf(err->name, sizeof err->name, "chat_template");
  }
  return FDY_ERR_UNSUPPORTED;
}

static fdy_status special(const fdy_tokenizer *tok, const char *spelling,
                          int32_t *out, fdy_error *err) {
  *out = fdy_tokenizer_special_id(tok, spelling);
  if (*out >= 0) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                "%s: the tokenizer has no %s, which the Llama 3 chat "
                "template needs",
                fdy_tokenizer_source(tok), spelling);
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
  const char *t = fdy_tokenizer_chat_template(tok);
  if (t && !is_llama3_template(t)) {
    return unsupported_template(tok, t, err);
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
  chat->pending = -1;
  chat->bos = fdy_tokenizer_bos(tok);
  fdy_status s = FDY_OK;
  if (chat->bos < 0) {
    s = special(tok, "<|begin_of_text|>", &chat->bos, err);
  }
  if (s == FDY_OK) {
    s = special(tok, "<|start_header_id|>", &chat->start_header, err);
  }
  if (s == FDY_OK) {
    s = special(tok, "<|end_header_id|>", &chat->end_header, err);
  }
  if (s == FDY_OK) {
    s = special(tok, "<|eot_id|>", &chat->eot, err);
  }
  if (s == FDY_OK && options && options->system &&
      !(chat->system = strdup(options->system))) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (s != FDY_OK) {
    fdy_chat_destroy(chat);
    return s;
  }
  chat->stop_count = fdy_tokenizer_stop_ids(tok, chat->stop);
  *out = chat;
  return FDY_OK;
}

void fdy_chat_destroy(fdy_chat *chat) {
  if (chat) {
    free(chat->system);
    free(chat);
  }
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
static fdy_status append_message(fdy_chat *chat, const char *role,
                                 const char *text, size_t len, fdy_tokens *out,
                                 fdy_error *err) {
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
    s = fdy_tokens_push(out, chat->bos, err);
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

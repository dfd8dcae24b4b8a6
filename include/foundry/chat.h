/* Chat conversations: the chat template (messages to token ids through a
 * tokenizer) and a conversation on a session that keeps the KV cache across
 * turns, so that a turn prefills only its own new ids.
 *
 * The template is the checkpoint's own Jinja chat_template, rendered as
 * Hugging Face transformers renders it (foundry/chat_template.h,
 * docs/chat-templates.md), or one of Foundry's: Llama 3 Instruct (BOS, each
 * message <|start_header_id|>ROLE<|end_header_id|> "\n\n" TEXT <|eot_id|>
 * with TEXT stripped as `| trim` does, the answer after
 * <|start_header_id|>assistant<|end_header_id|> "\n\n") and ChatML
 * (<|im_start|> ROLE "\n" TEXT <|im_end|> "\n", the answer after
 * <|im_start|> "assistant\n"). The rendered text becomes ids with the
 * special tokens that the template itself writes (and bos_token/eos_token);
 * text from messages is plain text, so special-token spellings in it stay
 * text.
 *
 * Thread-safety: a chat uses its session and tokenizer; one thread at a
 * time uses the three. */
#ifndef FOUNDRY_CHAT_H
#define FOUNDRY_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "foundry/chat_template.h"
#include "foundry/core.h"
#include "foundry/llama_session.h"
#include "foundry/speculative.h"
#include "foundry/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_chat fdy_chat;

/* Which template a chat applies. */
typedef enum fdy_chat_template {
  FDY_CHAT_TEMPLATE_AUTO,       /* the checkpoint's, else a default (below) */
  FDY_CHAT_TEMPLATE_LLAMA3,     /* Foundry's Llama 3 Instruct */
  FDY_CHAT_TEMPLATE_CHATML,     /* Foundry's ChatML */
  FDY_CHAT_TEMPLATE_CHECKPOINT, /* the checkpoint's chat_template */
  FDY_CHAT_TEMPLATE_FILE,       /* options.template_file */
} fdy_chat_template;

/* The most stop ids of a chat: the tokenizer's and the end of turn. */
#define FDY_CHAT_MAX_STOP (FDY_TOKENIZER_MAX_STOP + 1)

typedef struct fdy_chat_options {
  const char *system;  /* the system message (copied), written before the
                          first user message; NULL for none ("" is an empty
                          one) */
  uint32_t max_tokens; /* ids per answer at most; 0 = until a stop id or the
                          context is full */
  const fdy_sample_params *sampling; /* how answers are drawn (copied);
                                        NULL = greedy */
  fdy_chat_template template_kind;   /* AUTO (the zero value), or LLAMA3 or
                                        CHATML forced whatever the
                                        tokenizer's */
  const char *template_file;         /* a Jinja template file applied whatever
                                        template_kind and the tokenizer's;
                                        NULL for none */
  /* speculative decoding: a draft session (of the same vocabulary, on the
   * same backend; it must outlive the chat and holds the conversation as
   * the session does) and its options (copied); NULL for none. Sampling
   * with a draft needs both sessions created without ids_only. */
  fdy_llama_session *draft;
  const fdy_llama_speculative_options *speculative;
} fdy_chat_options;

/* A conversation on session with a template and the stop ids of tok
 * (fdy_tokenizer_stop_ids) and of the template (the special token it
 * writes right after an answer: <|eot_id|>, <|im_end|>, </s>, <|end|>).
 * The session and the tokenizer must outlive the chat; the first turn
 * resets the session. The template: options->template_file when given;
 * else LLAMA3 or CHATML when options->template_kind forces one; else the
 * checkpoint's: chat_template.jinja beside the tokenizer's file, else
 * tokenizer_config.json's chat_template; without one (a tiktoken file, a
 * base model) Llama 3's, or ChatML's when tok has <|im_start|> and no
 * <|start_header_id|>. Errors: a template file, or a chat_template.jinja
 * that is there, that cannot be read: fdy_input_read's (err->name the
 * file: FDY_ERR_NOT_FOUND for a template_file that is not there,
 * FDY_ERR_IO for one that is not a regular file); a template outside the
 * Jinja Foundry interprets or malformed FDY_ERR_UNSUPPORTED / FDY_ERR_PARSE
 * (err->name "chat_template"; the message names the file and the
 * construct or the line and column); a template that writes a <|...|>
 * spelling the tokenizer has no special token for FDY_ERR_UNSUPPORTED
 * (err->name the spelling); no session or tokenizer, an unknown
 * template_kind or sampling refused by fdy_llama_sampling_check
 * FDY_ERR_INVALID_ARGUMENT; FDY_ERR_OUT_OF_MEMORY. *out is NULL on
 * failure. */
fdy_status fdy_chat_create(fdy_llama_session *session, fdy_tokenizer *tok,
                           const fdy_chat_options *options, fdy_chat **out,
                           fdy_error *err);
/* Frees the chat (not its session or tokenizer); NULL is a no-op. */
void fdy_chat_destroy(fdy_chat *chat);

/* The template the chat applies (LLAMA3, CHATML, CHECKPOINT or FILE). */
fdy_chat_template fdy_chat_template_kind(const fdy_chat *chat);

/* Writes the ids that end an answer (the tokenizer's stop ids and the
 * template's end of turn, each once) to ids; returns how many. */
uint32_t fdy_chat_stop_ids(const fdy_chat *chat,
                           int32_t ids[FDY_CHAT_MAX_STOP]);

/* Appends to out the ids that fdy_chat_turn would prefill for the user
 * message text (len bytes, any bytes). The first turn: the template's
 * rendering of the conversation (the system message when there is one,
 * the user message) with the generation prompt. A later turn: the end of
 * the previous answer (its last id, which generation returns but never
 * feeds, unless it is a stop id), then what the template writes after the
 * answer up to the next generation prompt (its end of turn, the user
 * message, the assistant header: every answer ends with it in the cache,
 * whatever stopped it); when the template renders the earlier turns
 * differently once the conversation grows (Mistral's system message moves
 * to the last user message), the whole conversation again, the answers as
 * their text, and the turn starts the session afresh. The chat is
 * unchanged. Errors as fdy_jinja_render's (the template's
 * raise_exception: FDY_ERR_INVALID_ARGUMENT, err->name "raise_exception")
 * and fdy_tokenizer_encode's; out keeps its earlier ids on failure. */
fdy_status fdy_chat_prompt(fdy_chat *chat, const char *text, size_t len,
                           fdy_tokens *out, fdy_error *err);

typedef enum fdy_chat_stop {
  FDY_CHAT_STOP_EOS,         /* the model produced a stop id */
  FDY_CHAT_STOP_MAX_TOKENS,  /* options.max_tokens ids */
  FDY_CHAT_STOP_CONTEXT,     /* every position of the context is used */
  FDY_CHAT_STOP_INTERRUPTED, /* on_token returned false */
} fdy_chat_stop;

/* Adds an earlier exchange, a user message and the assistant's answer
 * (both copied), to the conversation before its first turn (an API
 * request that carries the conversation so far): the first turn renders
 * them before its own message. After a turn: FDY_ERR_INVALID_ARGUMENT,
 * the chat unchanged; FDY_ERR_OUT_OF_MEMORY. */
fdy_status fdy_chat_add_exchange(fdy_chat *chat, const char *user,
                                 size_t user_len, const char *answer,
                                 size_t answer_len, fdy_error *err);

typedef struct fdy_chat_answer {
  uint32_t prompt_tokens; /* ids prefilled for the turn */
  uint32_t count;         /* ids generated, a final stop id included */
  fdy_chat_stop stop;
  double prefill_seconds, decode_seconds;
  /* prompt_tokens / prefill_seconds; (count - 1) / decode_seconds, 0 for
   * an answer of one id */
  double prefill_tokens_per_second, decode_tokens_per_second;
  fdy_llama_speculative_stats speculative; /* with a draft; zero otherwise */
} fdy_chat_answer;

/* One turn: the ids of fdy_chat_prompt(text) are prefilled after what the
 * session holds (from its start when they are the whole conversation), then the
 * answer is decoded with the chat's sampling (greedy by default; a seeded
 * stream draws by position, so each turn continues it), each id handed to
 * on_token (may be NULL; returning false stops the answer after that id)
 * as soon as it is computed, until a stop id, max_tokens ids or the end of
 * the context. A turn whose prompt does not fit in what is left of the
 * context is refused before any work: FDY_ERR_CONTEXT (err->expected = the
 * context, err->actual = the positions the conversation would need); the
 * chat is unchanged and a shorter message may still fit. An answer that
 * fills the context stops there (FDY_CHAT_STOP_CONTEXT); every later turn
 * is then refused. Other errors are those of fdy_llama_generate (with a
 * draft: fdy_llama_generate_speculative, its stats in out->speculative; ids
 * outside the model's vocabulary leave the chat unchanged; a backend
 * failure fails the session and so the chat). *out is zeroed on failure. */
fdy_status fdy_chat_turn(fdy_chat *chat, const char *text, size_t len,
                         fdy_llama_token_fn on_token, void *ctx,
                         fdy_chat_answer *out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif

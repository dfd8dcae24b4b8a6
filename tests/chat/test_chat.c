/* Tests of Llama 3 chat: the template's exact ids for a system + user turn
 * and a second turn (built by hand from the Llama 3 ids), whitespace and
 * special-token spellings in messages, a conversation whose second turn
 * prefills only its new ids and answers as a fresh session given the whole
 * history does, an interrupted answer, a stop id closing the answer with
 * <|eot_id|>, the refusal of a turn at context + 1 (the chat unchanged), an
 * answer that fills the context, the templates that are refused, and the
 * ChatML template against Hugging Face's ids. On a
 * make-model micro-llama3-vocab checkpoint (the real 128,256-id
 * vocabulary, random weights) with the shared Llama 3 tokenizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "foundry/chat.h"
#include "foundry/cpu.h"

/* Llama 3 ids the template is written with. */
enum {
  BOS = 128000,
  START = 128006, /* <|start_header_id|> */
  END = 128007,   /* <|end_header_id|> */
  EOT = 128009,   /* <|eot_id|> */
  SYSTEM = 9125,  /* "system" */
  USER = 882,     /* "user" */
  ASSISTANT = 78191,
  NN = 271, /* "\n\n" */
};

#define SYSTEM_TEXT "Answer briefly."
/* the first turn: BOS, the system message, the user's "Hello", the
 * answer's header ("\n\nAnswer briefly." is 271 16533 27851 13, "\n\nHello"
 * 271 9906) */
static const int32_t first_turn[] = {
    BOS,  START, SYSTEM, END,  NN,  16533, 27851,     13,  EOT, START,
    USER, END,   NN,     9906, EOT, START, ASSISTANT, END, NN};
#define FIRST_TURN (sizeof first_turn / sizeof first_turn[0])

typedef struct world {
  char dir[64];
  char model_dir[128];
  fdy_llama_model *model;
  fdy_tokenizer *tok;
  fdy_backend *cpu;
} world;

static const char *data_dir(void) {
  const char *dir = getenv("FOUNDRY_TEST_DATA");
  return dir ? dir : "tests/data";
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  world *w = calloc(1, sizeof *w);
  assert_non_null(w);
  snprintf(w->dir, sizeof w->dir, "/tmp/foundry-chat-XXXXXX");
  assert_non_null(mkdtemp(w->dir));
  snprintf(w->model_dir, sizeof w->model_dir, "%s/model", w->dir);
  fdy_error err;
  assert_int_equal(
      fdy_llama_make_model("micro-llama3-vocab", 1, w->model_dir, &err),
      FDY_OK);
  assert_int_equal(fdy_llama_open(w->model_dir, &w->model, &err), FDY_OK);
  char path[512];
  snprintf(path, sizeof path, "%s/tokenizer/llama3-tokenizer.model",
           data_dir());
  assert_int_equal(fdy_tokenizer_open(path, &w->tok, &err), FDY_OK);
  fdy_cpu_options o = {.threads = 2};
  assert_int_equal(fdy_cpu_backend_create(&o, &w->cpu, &err), FDY_OK);
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  fdy_backend_destroy(w->cpu);
  fdy_tokenizer_destroy(w->tok);
  fdy_llama_close(w->model);
  assert_int_equal(nftw(w->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
  free(w);
  return 0;
}

static fdy_llama_session *
session_of(const world *w, const fdy_llama_model *model, uint32_t context) {
  fdy_llama_session_options o = {.backend = w->cpu, .context = context};
  fdy_llama_session *s = NULL;
  fdy_error err;
  assert_int_equal(fdy_llama_session_create(model, &o, &s, &err), FDY_OK);
  return s;
}

static fdy_chat *chat_of(const world *w, fdy_llama_session *s,
                         const char *system, uint32_t max_tokens) {
  fdy_chat_options o = {.system = system, .max_tokens = max_tokens};
  fdy_chat *chat = NULL;
  fdy_error err;
  assert_int_equal(fdy_chat_create(s, w->tok, &o, &chat, &err), FDY_OK);
  return chat;
}

/* fdy_chat_prompt of text, as a fresh array. */
static fdy_tokens prompt_of(fdy_chat *chat, const char *text) {
  fdy_tokens ids = {0};
  fdy_error err;
  assert_int_equal(fdy_chat_prompt(chat, text, strlen(text), &ids, &err),
                   FDY_OK);
  return ids;
}

static void push(fdy_tokens *t, const int32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(fdy_tokens_push(t, ids[i], NULL), FDY_OK);
  }
}

static void expect_ids(const fdy_tokens *got, const int32_t *want, size_t n) {
  assert_int_equal(got->count, n);
  assert_memory_equal(got->ids, want, n * sizeof *want);
}

/* True when id is among the first n of ids. */
static bool seen_before(const int32_t *ids, uint32_t n, int32_t id) {
  for (uint32_t i = 0; i < n; i++) {
    if (ids[i] == id) {
      return true;
    }
  }
  return false;
}

/* What the token callback saw. */
typedef struct answer_ids {
  int32_t ids[64];
  uint32_t count;
  uint32_t stop_after; /* returns false for this id (1-based); 0 = never */
} answer_ids;

static bool collect(void *ctx, int32_t id) {
  answer_ids *a = ctx;
  assert_true(a->count < 64);
  a->ids[a->count++] = id;
  return a->count != a->stop_after;
}

/* ---- the template ------------------------------------------------------- */

static void test_first_turn_ids(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 64);
  fdy_chat *chat = chat_of(w, s, SYSTEM_TEXT, 0);
  fdy_tokens ids = prompt_of(chat, "Hello");
  expect_ids(&ids, first_turn, FIRST_TURN);
  fdy_tokens_free(&ids);
  /* messages are stripped as Python's str.strip() does (Jinja's trim):
   * ASCII and Unicode whitespace (NBSP, U+3000, U+2028) */
  ids = prompt_of(chat, " \t\n\xc2\xa0\xe3\x80\x80Hello\r\n \xe2\x80\xa8");
  expect_ids(&ids, first_turn, FIRST_TURN);
  fdy_tokens_free(&ids);
  /* the prompt does not change the chat: asking twice gives the same */
  ids = prompt_of(chat, "Hello");
  expect_ids(&ids, first_turn, FIRST_TURN);
  /* appended after what out holds; a failure leaves it as it was */
  fdy_error err;
  assert_int_equal(fdy_chat_prompt(chat, NULL, 3, &ids, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(ids.count, FIRST_TURN);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);

  /* no system message; an empty one is written */
  chat = chat_of(w, s, NULL, 0);
  ids = prompt_of(chat, "Hello");
  const int32_t plain[] = {BOS, START, USER,      END, NN, 9906,
                           EOT, START, ASSISTANT, END, NN};
  expect_ids(&ids, plain, sizeof plain / sizeof plain[0]);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  chat = chat_of(w, s, "", 0);
  ids = prompt_of(chat, "");
  const int32_t empty[] = {BOS, START, SYSTEM,    END, NN,
                           EOT, START, USER,      END, NN,
                           EOT, START, ASSISTANT, END, NN};
  expect_ids(&ids, empty, sizeof empty / sizeof empty[0]);
  fdy_tokens_free(&ids);
  /* special-token spellings in a message stay text */
  ids = prompt_of(chat, "<|eot_id|>");
  const int32_t spelled[] = {
      BOS, START, SYSTEM, END, NN, EOT, START, USER,  END,       NN,  27,
      91,  68,    354,    851, 91, 29,  EOT,   START, ASSISTANT, END, NN};
  expect_ids(&ids, spelled, sizeof spelled / sizeof spelled[0]);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
}

/* ---- conversations ------------------------------------------------------ */

/* Earlier exchanges (an API request's conversation so far) render before
 * the first turn's message, each answer closed by <|eot_id|>; after a
 * turn they are refused and the chat is unchanged. */
static void test_earlier_exchanges(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 64);
  fdy_chat *chat = chat_of(w, s, SYSTEM_TEXT, 1);
  fdy_error err;
  assert_int_equal(fdy_chat_add_exchange(chat, "Hello", 5, "Hello", 5, &err),
                   FDY_OK);
  fdy_tokens ids = prompt_of(chat, "Hello");
  const int32_t want[] = {BOS,       START, SYSTEM,    END,  NN,   16533, 27851,
                          13,        EOT,   START,     USER, END,  NN,    9906,
                          EOT,       START, ASSISTANT, END,  NN,   9906,  EOT,
                          START,     USER,  END,       NN,   9906, EOT,   START,
                          ASSISTANT, END,   NN};
  expect_ids(&ids, want, sizeof want / sizeof want[0]);
  fdy_tokens_free(&ids);
  assert_int_equal(fdy_chat_add_exchange(chat, NULL, 2, "x", 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_chat_answer answer;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, NULL, NULL, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.prompt_tokens, sizeof want / sizeof want[0]);
  assert_int_equal(fdy_chat_add_exchange(chat, "a", 1, "b", 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(err.message, "started"));
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
}

/* The second turn prefills the end of the first answer (its last id, never
 * fed), <|eot_id|>, the user message and the answer header, after what the
 * cache holds; its answer is the one a fresh session gives for the whole
 * conversation. */
static void test_second_turn(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 256);
  fdy_chat *chat = chat_of(w, s, SYSTEM_TEXT, 5);
  answer_ids a1 = {0}, a2 = {0};
  fdy_chat_answer answer;
  fdy_error err;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a1, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.prompt_tokens, FIRST_TURN);
  assert_int_equal(answer.count, 5);
  assert_int_equal(a1.count, 5);
  assert_int_equal(answer.stop, FDY_CHAT_STOP_MAX_TOKENS);
  assert_true(answer.prefill_tokens_per_second > 0);
  /* the prompt and the four ids fed back */
  assert_int_equal(fdy_llama_session_position(s), FIRST_TURN + 4);

  fdy_tokens second = prompt_of(chat, "How are you?");
  fdy_tokens want = {0};
  const int32_t tail[] = {EOT, START, USER, END,   NN,        4438, 527,
                          499, 30,    EOT,  START, ASSISTANT, END,  NN};
  push(&want, &a1.ids[4], 1);
  push(&want, tail, sizeof tail / sizeof tail[0]);
  expect_ids(&second, want.ids, want.count);
  fdy_tokens_free(&want);

  assert_int_equal(
      fdy_chat_turn(chat, "How are you?", 12, collect, &a2, &answer, &err),
      FDY_OK);
  assert_int_equal(answer.prompt_tokens, second.count);
  assert_int_equal(a2.count, 5);
  assert_int_equal(fdy_llama_session_position(s),
                   FIRST_TURN + 4 + second.count + 4);

  /* a fresh session over the whole conversation answers the same */
  fdy_tokens history = {0};
  push(&history, first_turn, FIRST_TURN);
  push(&history, a1.ids, 4);
  push(&history, second.ids, second.count);
  fdy_llama_session *fresh = session_of(w, w->model, 256);
  fdy_llama_generate_options o = {.max_tokens = 5, .ignore_eos = true};
  fdy_llama_generation gen;
  assert_int_equal(fdy_llama_generate(fresh, history.ids,
                                      (uint32_t)history.count, &o, &gen, &err),
                   FDY_OK);
  assert_int_equal(gen.count, 5);
  assert_memory_equal(gen.ids, a2.ids, 5 * sizeof *gen.ids);
  fdy_llama_generation_free(&gen);
  fdy_llama_session_destroy(fresh);
  fdy_tokens_free(&history);
  fdy_tokens_free(&second);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
}

/* An answer stopped by the callback keeps its ids: the last one opens the
 * next turn, followed by <|eot_id|>. */
static void test_interrupted_answer(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 256);
  fdy_chat *chat = chat_of(w, s, SYSTEM_TEXT, 0);
  answer_ids a = {.stop_after = 2};
  fdy_chat_answer answer;
  fdy_error err;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.stop, FDY_CHAT_STOP_INTERRUPTED);
  assert_int_equal(answer.count, 2);
  assert_int_equal(fdy_llama_session_position(s), FIRST_TURN + 1);
  fdy_tokens next = prompt_of(chat, "Hi");
  const int32_t want[] = {a.ids[1], EOT, START, USER,      END, NN,
                          13347,    EOT, START, ASSISTANT, END, NN};
  expect_ids(&next, want, sizeof want / sizeof want[0]);
  fdy_tokens_free(&next);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
}

/* A copy of the world's checkpoint whose config.json lists eos_token_id
 * eos (the model files are linked, not copied). */
static void model_with_eos(const world *w, int32_t eos, char *out, size_t cap) {
  snprintf(out, cap, "%s/eos-%d", w->dir, eos);
  assert_int_equal(mkdir(out, 0700), 0);
  char src[600], dst[800];
  static const char *const files[] = {"model.safetensors",
                                      "model.safetensors.index.json"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(src, sizeof src, "%s/%s", w->model_dir, files[i]);
    snprintf(dst, sizeof dst, "%s/%s", out, files[i]);
    assert_int_equal(symlink(src, dst), 0);
  }
  snprintf(src, sizeof src, "%s/config.json", w->model_dir);
  json_t *config = json_load_file(src, 0, NULL);
  assert_non_null(config);
  assert_int_equal(
      json_object_set_new(config, "eos_token_id", json_pack("[i]", eos)), 0);
  snprintf(dst, sizeof dst, "%s/config.json", out);
  assert_int_equal(json_dump_file(config, dst, 0), 0);
  json_decref(config);
}

/* The answer stops at an EOS id of the config (here an id the model
 * greedily produces, not its first, so that the stop is forced); the next
 * turn closes the answer with <|eot_id|> in its place. */
static void test_stop_id(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 256);
  fdy_chat *chat = chat_of(w, s, SYSTEM_TEXT, 16);
  answer_ids a = {0};
  fdy_chat_answer answer;
  fdy_error err;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.count, 16);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
  /* the first id that was not produced before */
  uint32_t k = 1;
  while (k < 16 && seen_before(a.ids, k, a.ids[k])) {
    k++;
  }
  assert_true(k < 16);
  int32_t eos = a.ids[k];

  char dir[700];
  model_with_eos(w, eos, dir, sizeof dir);
  fdy_llama_model *model = NULL;
  assert_int_equal(fdy_llama_open(dir, &model, &err), FDY_OK);
  s = session_of(w, model, 256);
  chat = chat_of(w, s, SYSTEM_TEXT, 0);
  answer_ids b = {0};
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &b, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.stop, FDY_CHAT_STOP_EOS);
  assert_int_equal(answer.count, k + 1);
  assert_memory_equal(b.ids, a.ids, (k + 1) * sizeof *a.ids);
  fdy_tokens next = prompt_of(chat, "Hi");
  const int32_t want[] = {EOT, START, USER,      END, NN, 13347,
                          EOT, START, ASSISTANT, END, NN};
  expect_ids(&next, want, sizeof want / sizeof want[0]);
  fdy_tokens_free(&next);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
  fdy_llama_close(model);
}

/* A turn needing context + 1 positions is refused before any work and the
 * chat is unchanged; one that fits exactly is answered with one id (the
 * first id needs no position) and stops at the full context; every later
 * turn is refused. */
static void test_context_refusal(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, FIRST_TURN - 1);
  fdy_chat *chat = chat_of(w, s, SYSTEM_TEXT, 0);
  answer_ids a = {0};
  fdy_chat_answer answer;
  fdy_error err;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(err.kind, FDY_ERR_CONTEXT);
  assert_int_equal(err.expected, FIRST_TURN - 1);
  assert_int_equal(err.actual, FIRST_TURN);
  assert_int_equal(a.count, 0);
  assert_int_equal(answer.count, 0);
  assert_int_equal(fdy_llama_session_position(s), 0);
  /* unchanged: the next prompt is still a first turn */
  fdy_tokens ids = prompt_of(chat, "Hello");
  expect_ids(&ids, first_turn, FIRST_TURN);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  /* a shorter turn still fits */
  chat = chat_of(w, s, NULL, 0);
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.prompt_tokens, 11);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);

  s = session_of(w, w->model, FIRST_TURN);
  chat = chat_of(w, s, SYSTEM_TEXT, 0);
  a = (answer_ids){0};
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.count, 1);
  assert_int_equal(answer.stop, FDY_CHAT_STOP_CONTEXT);
  assert_int_equal(fdy_llama_session_position(s), FIRST_TURN);
  /* the answer's id, <|eot_id|>, the user message, the header: 12 more */
  assert_int_equal(fdy_chat_turn(chat, "Hi", 2, collect, &a, &answer, &err),
                   FDY_ERR_CONTEXT);
  assert_int_equal(err.expected, FIRST_TURN);
  assert_int_equal(err.actual, FIRST_TURN + 12);
  assert_int_equal(fdy_llama_session_position(s), FIRST_TURN);
  fdy_chat_destroy(chat);
  fdy_llama_session_destroy(s);
}

/* ---- templates ---------------------------------------------------------- */

/* Writes a tokenizer directory: tiny/tokenizer.json with its
 * tokenizer_config.json's chat_template replaced by chat_template (NULL: no
 * config) and the special token "<|eot_id|>" renamed to rename (NULL:
 * kept). */
static void tokenizer_dir(const world *w, const char *name,
                          const char *chat_template, const char *rename,
                          char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", w->dir, name);
  assert_int_equal(mkdir(out, 0700), 0);
  char src[600], dst[700];
  snprintf(src, sizeof src, "%s/tokenizer/tiny/tokenizer.json", data_dir());
  json_t *doc = json_load_file(src, 0, NULL);
  assert_non_null(doc);
  if (rename) {
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(doc, "added_tokens"), i, t) {
      if (strcmp(json_string_value(json_object_get(t, "content")),
                 "<|eot_id|>") == 0) {
        json_object_set_new(t, "content", json_string(rename));
      }
    }
  }
  snprintf(dst, sizeof dst, "%s/tokenizer.json", out);
  assert_int_equal(json_dump_file(doc, dst, 0), 0);
  json_decref(doc);
  if (chat_template) {
    snprintf(src, sizeof src, "%s/tokenizer/tiny/tokenizer_config.json",
             data_dir());
    doc = json_load_file(src, 0, NULL);
    assert_non_null(doc);
    json_object_set_new(doc, "chat_template", json_string(chat_template));
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", out);
    assert_int_equal(json_dump_file(doc, dst, 0), 0);
    json_decref(doc);
  }
}

static void test_templates(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 64);
  fdy_error err;
  fdy_tokenizer *tok = NULL;
  fdy_chat *chat = NULL;
  char dir[700];
  /* the tiny fixture carries a Llama 3 template: taken, with its ids
   * (BOS 263, the headers 269 and 270, <|eot_id|> 272) */
  snprintf(dir, sizeof dir, "%s/tokenizer/tiny", data_dir());
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err), FDY_OK);
  fdy_tokens ids = {0};
  assert_int_equal(fdy_chat_prompt(chat, "", 0, &ids, &err), FDY_OK);
  assert_int_equal(ids.ids[0], 263);
  assert_int_equal(ids.ids[1], 269);
  size_t eot = 0;
  for (size_t i = 0; i < ids.count; i++) {
    eot += ids.ids[i] == 272;
  }
  assert_int_equal(eot, 1);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  fdy_tokenizer_destroy(tok);

  /* a ChatML template is taken, and needs ChatML's special tokens, which
   * the tiny vocabulary lacks */
  tokenizer_dir(w, "chatml",
                "{% for message in messages %}{{'<|im_start|>' + "
                "message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n'}}{% endfor %}",
                NULL, dir, sizeof dir);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_null(chat);
  assert_string_equal(err.name, "<|im_start|>");
  /* forcing Llama 3's works there */
  fdy_chat_options forced = {.template_kind = FDY_CHAT_TEMPLATE_LLAMA3};
  assert_int_equal(fdy_chat_create(s, tok, &forced, &chat, &err), FDY_OK);
  assert_int_equal(fdy_chat_template_kind(chat), FDY_CHAT_TEMPLATE_LLAMA3);
  fdy_chat_destroy(chat);
  fdy_tokenizer_destroy(tok);

  /* a template outside the interpreter's Jinja is refused, naming the
   * file and the construct */
  tokenizer_dir(w, "indent",
                "{{ bos_token }}{% for message in messages %}[INST] "
                "{{ message['content'] | indent(2) }} [/INST]{% endfor %}",
                NULL, dir, sizeof dir);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_null(chat);
  assert_int_equal(err.kind, FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "chat_template");
  assert_non_null(strstr(err.message, "indent/tokenizer_config.json"));
  assert_non_null(strstr(err.message, "'filter indent'"));
  assert_int_equal(err.line, 1);
  /* unless a template is forced */
  assert_int_equal(fdy_chat_create(s, tok, &forced, &chat, &err), FDY_OK);
  fdy_chat_destroy(chat);
  forced.template_kind = (fdy_chat_template)7;
  assert_int_equal(fdy_chat_create(s, tok, &forced, &chat, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_tokenizer_destroy(tok);

  /* a malformed template: the line and column */
  tokenizer_dir(w, "unclosed",
                "{% for message in messages %}\n{{ message.content }}", NULL,
                dir, sizeof dir);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err), FDY_ERR_PARSE);
  assert_null(chat);
  assert_string_equal(err.name, "chat_template");
  assert_non_null(strstr(err.message, "unclosed 'for' block"));
  assert_int_equal(err.line, 1);
  assert_int_equal(err.column, 4);
  fdy_tokenizer_destroy(tok);

  /* a tokenizer without a special token of the template */
  tokenizer_dir(w, "no-eot", NULL, "<|not_eot_id|>", dir, sizeof dir);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "<|eot_id|>");
  fdy_tokenizer_destroy(tok);

  assert_int_equal(fdy_chat_create(NULL, w->tok, NULL, &chat, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_chat_create(s, NULL, NULL, &chat, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_chat_create(s, w->tok, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_chat_destroy(NULL);
  fdy_llama_session_destroy(s);
}

/* The checkpoint's own Jinja template on the tiny vocabulary: the special
 * token written right after an answer joins the stop ids; a template that
 * moves the system message to the last user message (as Mistral's does)
 * renders the whole conversation again on the second turn, which starts
 * the session afresh; raise_exception refuses a turn and leaves the chat
 * as it was; a template file and a chat_template.jinja beside the
 * tokenizer take precedence over tokenizer_config.json's. */
static void test_checkpoint_templates(void **state) {
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 256);
  fdy_error err;
  fdy_tokenizer *tok = NULL;
  fdy_chat *chat = NULL;
  char dir[700];
  tokenizer_dir(
      w, "moving",
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}"
      "{% if m.content == 'stop' %}{{ raise_exception('no stop') }}{% endif %}"
      "{% if loop.last and messages[0].role == 'system' %}[INST] "
      "{{ messages[0].content }}\n\n{{ m.content }} [/INST]{% else %}"
      "[INST] {{ m.content }} [/INST]{% endif %}{% elif m.role == "
      "'assistant' %} {{ m.content }}<|reserved_special_token_5|>{% endif %}"
      "{% endfor %}",
      NULL, dir, sizeof dir);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  fdy_chat_options o = {.system = "Be brief.", .max_tokens = 3};
  assert_int_equal(fdy_chat_create(s, tok, &o, &chat, &err), FDY_OK);
  assert_int_equal(fdy_chat_template_kind(chat), FDY_CHAT_TEMPLATE_CHECKPOINT);
  int32_t stop[FDY_CHAT_MAX_STOP];
  uint32_t n = fdy_chat_stop_ids(chat, stop);
  assert_true(seen_before(stop, n, 276)); /* <|reserved_special_token_5|> */

  fdy_tokens first = prompt_of(chat, "Hello");
  assert_int_equal(first.ids[0], 263); /* BOS, then plain text */
  for (size_t k = 1; k < first.count; k++) {
    assert_true(first.ids[k] < 263);
  }
  answer_ids a = {0};
  fdy_chat_answer answer;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.prompt_tokens, first.count);
  /* the second turn is the whole conversation again: BOS, the first
   * message, the answer and its end, the system message and the second */
  fdy_tokens second = prompt_of(chat, "Next");
  assert_int_equal(second.ids[0], 263);
  size_t ends = 0;
  for (size_t k = 0; k < second.count; k++) {
    ends += second.ids[k] == 276;
  }
  assert_int_equal(ends, 1);
  assert_true(second.count > first.count);
  answer_ids b = {0};
  assert_int_equal(fdy_chat_turn(chat, "Next", 4, collect, &b, &answer, &err),
                   FDY_OK);
  assert_int_equal(answer.prompt_tokens, second.count);
  assert_int_equal(fdy_llama_session_position(s),
                   second.count + answer.count - 1);
  /* the template refuses a message: the chat goes on as it was */
  fdy_tokens ids = {0};
  assert_int_equal(fdy_chat_prompt(chat, "stop", 4, &ids, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "raise_exception");
  assert_non_null(strstr(err.message, "no stop"));
  assert_int_equal(ids.count, 0);
  assert_int_equal(fdy_chat_turn(chat, "stop", 4, NULL, NULL, &answer, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_tokens third = prompt_of(chat, "Next");
  assert_int_equal(third.ids[0], 263);
  fdy_tokens_free(&third);
  fdy_tokens_free(&second);
  fdy_tokens_free(&first);
  fdy_chat_destroy(chat);

  /* a template file wins over the tokenizer's, and over a forced kind */
  char file[800];
  snprintf(file, sizeof file, "%s/header.jinja", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fputs("{% for m in messages %}<|start_header_id|>{{ m.role }}"
        "<|end_header_id|>{{ m.content }}<|eot_id|>{% endfor %}\n",
        f);
  fclose(f);
  o = (fdy_chat_options){.template_file = file,
                         .template_kind = FDY_CHAT_TEMPLATE_CHATML};
  assert_int_equal(fdy_chat_create(s, tok, &o, &chat, &err), FDY_OK);
  assert_int_equal(fdy_chat_template_kind(chat), FDY_CHAT_TEMPLATE_FILE);
  ids = prompt_of(chat, "Hi");
  assert_int_equal(ids.ids[0], 269);
  assert_int_equal(ids.ids[ids.count - 1], 272);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  /* chat_template.jinja beside the tokenizer is the checkpoint's */
  char beside[800];
  snprintf(beside, sizeof beside, "%s/chat_template.jinja", dir);
  assert_int_equal(rename(file, beside), 0);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err), FDY_OK);
  assert_int_equal(fdy_chat_template_kind(chat), FDY_CHAT_TEMPLATE_CHECKPOINT);
  ids = prompt_of(chat, "Hi");
  assert_int_equal(ids.ids[0], 269);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  /* a chat_template.jinja that is not a file is refused, not skipped */
  assert_int_equal(unlink(beside), 0);
  assert_int_equal(mkdir(beside, 0700), 0);
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err), FDY_ERR_IO);
  assert_null(chat);
  assert_string_equal(err.name, beside);
  assert_int_equal(rmdir(beside), 0);
  /* a template file that is not there */
  o.template_file = file;
  assert_int_equal(fdy_chat_create(s, tok, &o, &chat, &err), FDY_ERR_NOT_FOUND);
  assert_null(chat);
  assert_string_equal(err.name, file);
  fdy_tokenizer_destroy(tok);
  fdy_llama_session_destroy(s);
}

/* ChatML on the SmolLM-style tokenizer (tests/data/tokenizer/hf/smollm,
 * whose tokenizer_config.json carries SmolLM2-Instruct's template): the ids
 * equal Hugging Face's (jinja2 rendering the template, then `tokenizers`
 * encoding the text with its special tokens; tests/chat/test_cli.sh has
 * the same vectors), the template's default system message, <|im_end|>
 * among the stops, a second turn, and forcing templates. */
static void test_chatml(void **state) {
  if (!fdy_tokenizer_nfc_available()) {
    print_message("SmolLM's tokenizer.json normalizes NFC, which this build "
                  "lacks (no ICU)\n");
    skip();
  }
  world *w = *state;
  fdy_llama_session *s = session_of(w, w->model, 256);
  fdy_error err;
  fdy_tokenizer *tok = NULL;
  char dir[700];
  snprintf(dir, sizeof dir, "%s/tokenizer/hf/smollm", data_dir());
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_false(fdy_tokenizer_add_bos(tok));

  static const int32_t system_user[] = {
      1,  85,  91, 327, 601, 201, 35,  622, 454, 84,  223, 68,  84,
      75, 71,  72, 618, 16,  2,   201, 1,   87,  357, 84,  201, 42,
      71, 368, 81, 2,   201, 1,   472, 85,  779, 325, 86,  201};
  fdy_chat_options o = {.system = SYSTEM_TEXT, .max_tokens = 3};
  fdy_chat *chat = NULL;
  assert_int_equal(fdy_chat_create(s, tok, &o, &chat, &err), FDY_OK);
  assert_int_equal(fdy_chat_template_kind(chat), FDY_CHAT_TEMPLATE_CHECKPOINT);
  int32_t stop[FDY_CHAT_MAX_STOP];
  uint32_t n = fdy_chat_stop_ids(chat, stop);
  assert_true(seen_before(stop, n, 2)); /* <|im_end|> */
  fdy_tokens ids = prompt_of(chat, "Hello");
  expect_ids(&ids, system_user, sizeof system_user / sizeof *system_user);
  fdy_tokens_free(&ids);

  /* a second turn: the answer's last id (unless a stop id), <|im_end|>,
   * "\n", the message and the header */
  answer_ids a = {0};
  fdy_chat_answer answer;
  assert_int_equal(fdy_chat_turn(chat, "Hello", 5, collect, &a, &answer, &err),
                   FDY_OK);
  static const int32_t how[] = {1,   87,  357, 84,  201, 42, 391, 659,
                                71,  223, 91,  370, 33,  2,  201, 1,
                                472, 85,  779, 325, 86,  201};
  fdy_tokens want = {0};
  if (answer.stop != FDY_CHAT_STOP_EOS) {
    push(&want, &a.ids[a.count - 1], 1);
  }
  push(&want, (const int32_t[]){2, 201}, 2);
  push(&want, how, sizeof how / sizeof *how);
  ids = prompt_of(chat, "How are you?");
  expect_ids(&ids, want.ids, want.count);
  fdy_tokens_free(&ids);
  fdy_tokens_free(&want);
  fdy_chat_destroy(chat);

  /* without a system message, the template's own; whitespace kept */
  static const int32_t user[] = {
      1,   85,  91,  327, 601, 201, 59,  370, 659, 71,  223, 67,  658,
      78,  624, 550, 223, 35,  43,  223, 472, 85,  779, 325, 86,  419,
      434, 760, 501, 79,  81,  78,  46,  47,  14,  331, 451, 691, 70,
      223, 68,  91,  223, 42,  87,  604, 692, 223, 40,  355, 71,  2,
      201, 1,   87,  357, 84,  201, 42,  71,  368, 81,  223, 89,  369,
      78,  70,  2,   201, 1,   472, 85,  779, 325, 86,  201};
  assert_int_equal(fdy_chat_create(s, tok, NULL, &chat, &err), FDY_OK);
  ids = prompt_of(chat, "Hello world");
  expect_ids(&ids, user, sizeof user / sizeof *user);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);
  static const int32_t spaces[] = {
      1,   85,  91,  327, 601, 201, 223, 82,  744, 330, 70,  223, 2,
      201, 1,   87,  357, 84,  201, 223, 331, 89,  81,  201, 503, 691,
      85,  223, 201, 2,   201, 1,   472, 85,  779, 325, 86,  201};
  o = (fdy_chat_options){.system = " padded "};
  assert_int_equal(fdy_chat_create(s, tok, &o, &chat, &err), FDY_OK);
  ids = prompt_of(chat, "  two\n lines \n");
  expect_ids(&ids, spaces, sizeof spaces / sizeof *spaces);
  fdy_tokens_free(&ids);
  fdy_chat_destroy(chat);

  /* Llama 3's cannot be forced on a ChatML vocabulary */
  o = (fdy_chat_options){.template_kind = FDY_CHAT_TEMPLATE_LLAMA3};
  assert_int_equal(fdy_chat_create(s, tok, &o, &chat, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "<|start_header_id|>");
  fdy_tokenizer_destroy(tok);
  fdy_llama_session_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_turn_ids),
      cmocka_unit_test(test_earlier_exchanges),
      cmocka_unit_test(test_second_turn),
      cmocka_unit_test(test_interrupted_answer),
      cmocka_unit_test(test_stop_id),
      cmocka_unit_test(test_context_refusal),
      cmocka_unit_test(test_templates),
      cmocka_unit_test(test_checkpoint_templates),
      cmocka_unit_test(test_chatml),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

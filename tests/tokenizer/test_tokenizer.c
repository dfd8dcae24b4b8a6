/* Tests of the tokenizer: the README test vector; every corpus file
 * (tests/data/tokenizer/corpus) encodes to the ids tiktoken gave
 * (expected/NAME.ids) and decodes back byte for byte; random bytes (mostly
 * invalid UTF-8) round-trip; invalid bytes become single-byte tokens;
 * special tokens only on request; the streaming decoder never hands out
 * half a character; the tiny tiktoken file and the tokenizer.json written
 * from it encode alike; every kind of bad tiktoken file, tokenizer.json and
 * tokenizer_config.json gives one error of the right kind naming the file
 * and the line or entry; a model directory's tokenizer is found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/tokenizer.h"
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* U+2581, SentencePiece's space */
#define SPACE "\xe2\x96\x81"

static const char *data_root;
static fdy_tokenizer *llama3; /* the Llama 3 ranks, loaded once */

static void data_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/tokenizer/%s", data_root, name);
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

static void write_all(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static void encode(fdy_tokenizer *tok, const char *text, size_t len,
                   unsigned flags, fdy_tokens *out) {
  fdy_error err;
  out->count = 0;
  if (fdy_tokenizer_encode(tok, text, len, flags, out, &err) != FDY_OK) {
    fail_msg("encode failed: %s", err.message);
  }
}

/* decode(ids) == text */
static void assert_decodes_to(const fdy_tokenizer *tok, const fdy_tokens *ids,
                              const char *text, size_t len) {
  char *bytes = NULL;
  size_t n = 0;
  fdy_error err;
  assert_int_equal(
      fdy_tokenizer_decode(tok, ids->ids, ids->count, &bytes, &n, &err),
      FDY_OK);
  assert_int_equal(n, len);
  assert_memory_equal(bytes, text, len);
  free(bytes);
}

static void test_readme_vector(void **state) {
  (void)state;
  const char *text = "This is a test sentence.";
  const int32_t expected[] = {128000, 2028, 374, 264, 1296, 11914, 13, 128001};
  fdy_tokens ids = {0};
  fdy_error err;
  assert_int_equal(fdy_tokens_push(&ids, fdy_tokenizer_bos(llama3), &err),
                   FDY_OK);
  assert_int_equal(
      fdy_tokenizer_encode(llama3, text, strlen(text), 0, &ids, &err), FDY_OK);
  assert_int_equal(fdy_tokens_push(&ids, fdy_tokenizer_eos(llama3), &err),
                   FDY_OK);
  assert_int_equal(ids.count, 8);
  assert_memory_equal(ids.ids, expected, sizeof expected);
  assert_int_equal(fdy_tokenizer_vocab_size(llama3), 128256);
  assert_int_equal(fdy_tokenizer_special_id(llama3, "<|eot_id|>"), 128009);
  assert_int_equal(fdy_tokenizer_special_id(llama3, "<|eom_id|>"), 128008);
  assert_int_equal(
      fdy_tokenizer_special_id(llama3, "<|reserved_special_token_247|>"),
      128255);
  assert_int_equal(fdy_tokenizer_special_id(llama3, "<|nope|>"), -1);
  /* generation stops after <|end_of_text|> and <|eot_id|> */
  int32_t stop[FDY_TOKENIZER_MAX_STOP];
  assert_int_equal(fdy_tokenizer_stop_ids(llama3, stop), 2);
  assert_int_equal(stop[0], 128001);
  assert_int_equal(stop[1], 128009);
  assert_true(fdy_tokenizer_is_special(llama3, 128000));
  assert_false(fdy_tokenizer_is_special(llama3, 2028));
  assert_false(fdy_tokenizer_is_special(llama3, 128256));
  assert_null(fdy_tokenizer_chat_template(llama3));
  assert_int_equal(fdy_tokenizer_encode(llama3, "x", 1, 4, &ids, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_tokens_free(&ids);
}

/* "1,2,3\n" into ids. */
static void parse_ids(const char *text, fdy_tokens *out) {
  fdy_error err;
  out->count = 0;
  for (const char *p = text; *p && *p != '\n';) {
    char *end = NULL;
    long v = strtol(p, &end, 10);
    assert_true(end > p);
    assert_int_equal(fdy_tokens_push(out, (int32_t)v, &err), FDY_OK);
    p = *end == ',' ? end + 1 : end;
  }
}

static void test_corpus(void **state) {
  (void)state;
  char dir[1024];
  data_path(dir, sizeof dir, "corpus");
  DIR *d = opendir(dir);
  assert_non_null(d);
  fdy_tokens ids = {0}, expected = {0};
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') {
      continue;
    }
    char path[2048], ids_path[2048], stem[256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    snprintf(stem, sizeof stem, "%s", e->d_name);
    *strrchr(stem, '.') = '\0';
    snprintf(ids_path, sizeof ids_path, "%s/tokenizer/expected/%s.ids",
             data_root, stem);
    size_t len = 0, ids_len = 0;
    char *text = read_all(path, &len);
    char *ids_text = read_all(ids_path, &ids_len);
    parse_ids(ids_text, &expected);
    encode(llama3, text, len, 0, &ids);
    if (ids.count != expected.count ||
        memcmp(ids.ids, expected.ids, ids.count * sizeof *ids.ids) != 0) {
      fail_msg("%s: ids differ from tiktoken's", e->d_name);
    }
    assert_decodes_to(llama3, &ids, text, len);
    free(text);
    free(ids_text);
    files++;
  }
  closedir(d);
  assert_true(files >= 12);
  fdy_tokens_free(&ids);
  fdy_tokens_free(&expected);
}

static fdy_tokenizer *load_fixture(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tokenizer/hf/%s/tokenizer.json", data_root,
           name);
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  if (fdy_tokenizer_load_hf(path, NULL, &tok, &err) != FDY_OK) {
    fail_msg("%s: %s", name, err.message);
  }
  return tok;
}

/* Any bytes round-trip: random bytes, and random mixes of valid
 * characters, broken sequences and ASCII. */
static void random_round_trips(fdy_tokenizer *tok) {
  static const char *const pieces[] = {"a",
                                       " ",
                                       "\n",
                                       "\r\n",
                                       "'LL",
                                       "12345",
                                       "\xc3\xa9",
                                       "\xe4\xb8\xad",
                                       "\xf0\x9f\x98\x80",
                                       "\xe2\x80\x8d",
                                       "\xff",
                                       "\xc3",
                                       "\xe4\xb8",
                                       "\x80",
                                       "\xed\xa0\x80",
                                       "<|eot_id|>",
                                       "\t\t",
                                       "\xc0\xaf",
                                       "\xf4\x90\x80\x80"};
  const size_t npieces = sizeof pieces / sizeof pieces[0];
  uint64_t seed = 13;
  char text[4096];
  fdy_tokens ids = {0};
  for (int round = 0; round < 300; round++) {
    size_t len = 0;
    while (len < sizeof text - 8) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      uint32_t r = (uint32_t)(seed >> 33);
      if (round % 2 == 0) {
        text[len++] = (char)r;
      } else {
        const char *p = pieces[r % npieces];
        memcpy(text + len, p, strlen(p));
        len += strlen(p);
      }
      if (r % 97 == 0) {
        break;
      }
    }
    encode(tok, text, len, 0, &ids);
    assert_decodes_to(tok, &ids, text, len);
    for (size_t i = 0; i < ids.count; i++) {
      assert_false(fdy_tokenizer_is_special(tok, ids.ids[i]));
    }
  }
  fdy_tokens_free(&ids);
}

/* The Llama 3 ranks, and Llama 2's pipeline: its normalizer puts "\u2581"
 * first and its decoder strips one space, and every byte that is not a
 * character of the vocabulary falls back to its <0xNN> token. */
static void test_random_bytes_round_trip(void **state) {
  (void)state;
  random_round_trips(llama3);
  fdy_tokenizer *llama2 = load_fixture("llama2");
  random_round_trips(llama2);
  fdy_tokenizer_destroy(llama2);
}

static int32_t byte_id(const fdy_tokenizer *tok, unsigned char b) {
  fdy_tokens ids = {0};
  encode((fdy_tokenizer *)tok, (const char *)&b, 1, 0, &ids);
  assert_int_equal(ids.count, 1);
  int32_t id = ids.ids[0];
  fdy_tokens_free(&ids);
  return id;
}

static void test_invalid_utf8(void **state) {
  (void)state;
  fdy_tokens ids = {0}, a = {0}, b = {0};
  /* The valid text around an invalid byte encodes as if split there. */
  encode(llama3, "hello", 5, 0, &a);
  encode(llama3, " world", 6, 0, &b);
  encode(llama3, "hello\xff world", 12, 0, &ids);
  assert_int_equal(ids.count, a.count + 1 + b.count);
  assert_memory_equal(ids.ids, a.ids, a.count * sizeof *a.ids);
  assert_int_equal(ids.ids[a.count], byte_id(llama3, 0xff));
  assert_memory_equal(ids.ids + a.count + 1, b.ids, b.count * sizeof *b.ids);
  /* A truncated character: one token per byte. */
  encode(llama3, "\xe4\xb8", 2, 0, &ids);
  assert_int_equal(ids.count, 2);
  assert_int_equal(ids.ids[0], byte_id(llama3, 0xe4));
  assert_int_equal(ids.ids[1], byte_id(llama3, 0xb8));
  /* A surrogate and an overlong encoding are invalid too. */
  encode(llama3, "\xed\xa0\x80\xc0\xaf", 5, 0, &ids);
  assert_int_equal(ids.count, 5);
  /* Empty text: no ids. */
  encode(llama3, "", 0, 0, &ids);
  assert_int_equal(ids.count, 0);
  fdy_tokens_free(&ids);
  fdy_tokens_free(&a);
  fdy_tokens_free(&b);
}

static void test_special_tokens(void **state) {
  (void)state;
  const char *text = "hi<|eot_id|>there<|begin_of_text|><|nope|>";
  fdy_tokens ids = {0}, plain = {0};
  encode(llama3, text, strlen(text), 0, &plain);
  for (size_t i = 0; i < plain.count; i++) {
    assert_false(fdy_tokenizer_is_special(llama3, plain.ids[i]));
  }
  assert_decodes_to(llama3, &plain, text, strlen(text));
  encode(llama3, text, strlen(text), FDY_ENCODE_SPECIAL, &ids);
  int specials = 0;
  for (size_t i = 0; i < ids.count; i++) {
    specials += fdy_tokenizer_is_special(llama3, ids.ids[i]);
  }
  assert_int_equal(specials, 2);
  assert_int_equal(ids.ids[1], 128009);
  assert_int_equal(ids.ids[3], 128000);
  assert_decodes_to(llama3, &ids, text, strlen(text));
  encode(llama3, "<|eot_id|>", 10, FDY_ENCODE_SPECIAL, &ids);
  assert_int_equal(ids.count, 1);
  assert_int_equal(ids.ids[0], 128009);
  fdy_tokens_free(&ids);
  fdy_tokens_free(&plain);
}

/* True when b[0..n) is whole UTF-8 characters. */
static bool whole_characters(const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t k = b[i] < 0x80 ? 1 : b[i] < 0xE0 ? 2 : b[i] < 0xF0 ? 3 : 4;
    if (i + k > n) {
      return false;
    }
    i += k;
  }
  return true;
}

static void test_stream(void **state) {
  (void)state;
  fdy_token_stream *stream = NULL;
  fdy_error err;
  assert_int_equal(fdy_token_stream_create(llama3, &stream, &err), FDY_OK);
  const char *text = NULL;
  size_t len = 0;
  /* The euro sign as three single-byte tokens: nothing until complete. */
  const unsigned char euro[] = {0xE2, 0x82, 0xAC};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(fdy_token_stream_push(stream, byte_id(llama3, euro[i]),
                                           &text, &len, &err),
                     FDY_OK);
    assert_int_equal(len, i < 2 ? 0 : 3);
  }
  assert_memory_equal(text, euro, 3);
  /* A byte that can never start a character comes out at once. */
  assert_int_equal(
      fdy_token_stream_push(stream, byte_id(llama3, 0xFF), &text, &len, &err),
      FDY_OK);
  assert_int_equal(len, 1);
  /* A lead byte followed by ASCII: both out, no waiting. */
  assert_int_equal(
      fdy_token_stream_push(stream, byte_id(llama3, 0xE2), &text, &len, &err),
      FDY_OK);
  assert_int_equal(len, 0);
  assert_int_equal(
      fdy_token_stream_push(stream, byte_id(llama3, 'a'), &text, &len, &err),
      FDY_OK);
  assert_int_equal(len, 2);
  /* An incomplete character at the end comes out at finish. */
  assert_int_equal(
      fdy_token_stream_push(stream, byte_id(llama3, 0xF0), &text, &len, &err),
      FDY_OK);
  assert_int_equal(len, 0);
  assert_int_equal(fdy_token_stream_push(stream, 999999, &text, &len, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_token_stream_finish(stream, &text, &len);
  assert_int_equal(len, 1);
  assert_int_equal((unsigned char)text[0], 0xF0);

  /* Every corpus-like text: chunks are whole characters and add up to
   * decode's bytes. */
  char path[1024];
  data_path(path, sizeof path, "corpus/emoji.txt");
  size_t n = 0;
  char *emoji = read_all(path, &n);
  fdy_tokens ids = {0};
  encode(llama3, emoji, n, 0, &ids);
  char *joined = malloc(n);
  assert_non_null(joined);
  size_t at = 0;
  for (size_t i = 0; i < ids.count; i++) {
    assert_int_equal(
        fdy_token_stream_push(stream, ids.ids[i], &text, &len, &err), FDY_OK);
    assert_true(whole_characters((const unsigned char *)text, len));
    memcpy(joined + at, text, len);
    at += len;
  }
  fdy_token_stream_finish(stream, &text, &len);
  assert_int_equal(len, 0);
  assert_int_equal(at, n);
  assert_memory_equal(joined, emoji, n);
  free(joined);
  free(emoji);
  fdy_tokens_free(&ids);
  fdy_token_stream_destroy(stream);
  fdy_token_stream_destroy(NULL);
}

static void test_decode_errors(void **state) {
  (void)state;
  const int32_t ids[] = {2028, -1};
  char *out = (char *)"unchanged";
  size_t len = 7;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_decode(llama3, ids, 2, &out, &len, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(out);
  assert_int_equal(err.ids[0], -1);
  assert_int_equal(err.ids[1], 1);
  const char *bytes = NULL;
  assert_int_equal(
      fdy_tokenizer_token_bytes(llama3, 128256, &bytes, &len, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 128256);
  assert_int_equal(
      fdy_tokenizer_token_bytes(llama3, 128009, &bytes, &len, &err), FDY_OK);
  assert_int_equal(len, 10);
  assert_memory_equal(bytes, "<|eot_id|>", 10);
}

/* ---- the tiny fixture: tiktoken and tokenizer.json alike ------------- */

static void test_tiny_json_matches_tiktoken(void **state) {
  (void)state;
  char path[1024], json_path[1024], config_path[1024];
  data_path(path, sizeof path, "tiny.tiktoken");
  data_path(json_path, sizeof json_path, "tiny/tokenizer.json");
  data_path(config_path, sizeof config_path, "tiny/tokenizer_config.json");
  fdy_tokenizer *tik = NULL, *hf = NULL;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_load_tiktoken(path, &tik, &err), FDY_OK);
  assert_int_equal(fdy_tokenizer_load_hf(json_path, config_path, &hf, &err),
                   FDY_OK);
  const char *text = "the thing, then the ring; nothing in 'the' THE\xff";
  fdy_tokens a = {0}, b = {0};
  encode(tik, text, strlen(text), 0, &a);
  encode(hf, text, strlen(text), 0, &b);
  assert_int_equal(a.count, b.count);
  assert_memory_equal(a.ids, b.ids,
                      a.count *
                          sizeof *a.ids); /* "th" (rank 256) merges before " t"
                                             (258), then "in" before "ng". */
  encode(tik, " thing", 6, 0, &a);
  const int32_t expected[] = {32, 256, 261};
  assert_int_equal(a.count, 3);
  assert_memory_equal(a.ids, expected, sizeof expected);
  assert_int_equal(fdy_tokenizer_vocab_size(hf), 263 + 256);
  assert_int_equal(fdy_tokenizer_bos(hf), 263);
  assert_int_equal(fdy_tokenizer_eos(hf), 263 + 9); /* eos_token eot_id */
  assert_int_equal(fdy_tokenizer_eos(tik), 263 + 1);
  /* eos_token <|eot_id|> is listed once; tiktoken has both */
  int32_t stop[FDY_TOKENIZER_MAX_STOP];
  assert_int_equal(fdy_tokenizer_stop_ids(hf, stop), 1);
  assert_int_equal(stop[0], 263 + 9);
  assert_int_equal(fdy_tokenizer_stop_ids(tik, stop), 2);
  assert_int_equal(stop[0], 263 + 1);
  assert_int_equal(stop[1], 263 + 9);
  assert_non_null(fdy_tokenizer_chat_template(hf));
  assert_string_equal(fdy_tokenizer_source(hf), json_path);
  fdy_tokens_free(&a);
  fdy_tokens_free(&b);
  fdy_tokenizer_destroy(tik);
  fdy_tokenizer_destroy(hf);
  fdy_tokenizer_destroy(NULL);
}

/* ---- Hugging Face's ids (issue #30) ------------------------------------ */

/* The ids of a JSON array into out (emptied first). */
static void json_ids(json_t *array, fdy_tokens *out) {
  fdy_error err;
  out->count = 0;
  size_t i;
  json_t *v;
  json_array_foreach(array, i, v) {
    assert_int_equal(fdy_tokens_push(out, (int32_t)json_integer_value(v), &err),
                     FDY_OK);
  }
}

static bool valid_utf8(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t k = u[i] < 0x80                    ? 1
               : u[i] >= 0xC2 && u[i] <= 0xDF ? 2
               : u[i] >= 0xE0 && u[i] <= 0xEF ? 3
               : u[i] >= 0xF0 && u[i] <= 0xF4 ? 4
                                              : 0;
    if (k == 0 || i + k > n) {
      return false;
    }
    for (size_t j = 1; j < k; j++) {
      if ((u[i + j] & 0xC0) != 0x80) {
        return false;
      }
    }
    i += k;
  }
  return true;
}

static bool same_ids(const fdy_tokens *a, const fdy_tokens *b) {
  return a->count == b->count &&
         (a->count == 0 ||
          memcmp(a->ids, b->ids, a->count * sizeof *a->ids) == 0);
}

/* Foundry's tokenizer tok against Hugging Face's expected.json of the
 * fixture name (tests/data/tokenizer/hf): the ids of every string with
 * special tokens recognised and as text, and the text of decoding, all at
 * once and as a stream. Returns the strings checked. */
static size_t check_fixture(fdy_tokenizer *tok, const char *name) {
  char expected_path[1024];
  snprintf(expected_path, sizeof expected_path,
           "%s/tokenizer/hf/%s/expected.json", data_root, name);
  fdy_error err;
  json_error_t jerr;
  json_t *doc = json_load_file(expected_path, JSON_ALLOW_NUL, &jerr);
  assert_non_null(doc);
  json_t *cases = json_object_get(doc, "cases");
  assert_true(json_array_size(cases) > 100);
  fdy_token_stream *stream = NULL;
  assert_int_equal(fdy_token_stream_create(tok, &stream, &err), FDY_OK);
  fdy_tokens ids = {0}, want = {0};
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    json_t *text = json_object_get(c, "text");
    const char *t = json_string_value(text);
    size_t len = json_string_length(text);
    static const char *const keys[] = {"special", "plain"};
    for (int k = 0; k < 2; k++) {
      json_ids(json_object_get(c, keys[k]), &want);
      ids.count = 0;
      encode(tok, t, len, k == 0 ? FDY_ENCODE_SPECIAL : 0, &ids);
      if (!same_ids(&ids, &want)) {
        fail_msg("%s: case %zu (%s) '%.60s': %zu ids, Hugging Face %zu", name,
                 i, keys[k], t, ids.count, want.count);
      }
    }
    json_ids(json_object_get(c, "special"), &want);
    json_t *decoded = json_object_get(c, "decoded");
    char *bytes = NULL;
    size_t blen = 0;
    assert_int_equal(
        fdy_tokenizer_decode(tok, want.ids, want.count, &bytes, &blen, &err),
        FDY_OK);
    /* Foundry decodes to the bytes; Hugging Face to a string, with
     * U+FFFD for bytes that are not UTF-8 (a byte the vocabulary
     * lacks was left out of a character) */
    bool utf8 = valid_utf8(bytes, blen);
    if (!utf8 ? !strstr(json_string_value(decoded), "\xEF\xBF\xBD")
              : blen != json_string_length(decoded) ||
                    memcmp(bytes, json_string_value(decoded), blen) != 0) {
      fail_msg("%s: case %zu: decoding differs from Hugging Face's", name, i);
    }
    /* the stream (reused across the cases) hands out the same bytes */
    size_t at = 0;
    const char *chunk = NULL;
    size_t chunk_len = 0;
    for (size_t j = 0; j <= want.count; j++) {
      if (j < want.count) {
        assert_int_equal(fdy_token_stream_push(stream, want.ids[j], &chunk,
                                               &chunk_len, &err),
                         FDY_OK);
      } else {
        fdy_token_stream_finish(stream, &chunk, &chunk_len);
      }
      assert_true(at + chunk_len <= blen);
      assert_memory_equal(chunk, bytes + at, chunk_len);
      at += chunk_len;
    }
    assert_int_equal(at, blen);
    free(bytes);
  }
  size_t checked = json_array_size(cases);
  fdy_token_stream_destroy(stream);
  json_decref(doc);
  fdy_tokens_free(&ids);
  fdy_tokens_free(&want);
  return checked;
}

/* tests/data/tokenizer/hf: tokenizer.json files that Hugging Face
 * `tokenizers` trained and wrote, byte-level and SentencePiece-style, with
 * its ids for a corpus of strings (scripts/make_hf_tokenizer_tests.py):
 * Foundry gives exactly those (check_fixture). */
static void test_hf_reference(void **state) {
  (void)state;
  static const char *const names[] = {
      "gpt2", "smollm", "roberta", "llama2", "mistral", "metaspace", "never"};
  size_t checked = 0;
  for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/hf/%s/tokenizer.json", data_root,
             names[n]);
    fdy_tokenizer *tok = NULL;
    fdy_error err;
    fdy_status loaded = fdy_tokenizer_load_hf(path, NULL, &tok, &err);
    if (!fdy_tokenizer_nfc_available() && loaded == FDY_ERR_UNSUPPORTED &&
        strcmp(err.name, "normalizer") == 0) {
      print_message("skipped %s: %s\n", names[n], err.message);
      continue;
    }
    if (loaded != FDY_OK) {
      fail_msg("%s: %s", names[n], err.message);
    }
    checked += check_fixture(tok, names[n]);
    fdy_tokenizer_destroy(tok);
  }
  assert_true(checked > 600);
}

/* ---- bad tiktoken files ------------------------------------------------ */

static char work[256];

/* Writes text as work/name and returns the path (static buffer). */
static const char *scratch_file(const char *name, const char *text,
                                size_t len) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", work, name);
  write_all(path, text, len);
  return path;
}

/* The tiny ranks with line `line` (1-based) replaced by `with` (NULL:
 * removed), or with `extra` appended. */
static char *tiny_ranks(int line, const char *with, const char *extra) {
  char path[1024];
  size_t len = 0;
  data_path(path, sizeof path, "tiny.tiktoken");
  char *text = read_all(path, &len);
  size_t cap = len + 256;
  char *out = malloc(cap);
  assert_non_null(out);
  size_t at = 0;
  int n = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    n++;
    if (n == line) {
      if (with) {
        at += (size_t)snprintf(out + at, cap - at, "%s\n", with);
      }
    } else {
      memcpy(out + at, p, (size_t)(nl - p + 1));
      at += (size_t)(nl - p + 1);
    }
    p = nl + 1;
  }
  at += (size_t)snprintf(out + at, cap - at, "%s", extra ? extra : "");
  free(text);
  return out;
}

static void expect_tiktoken_error(const char *text, size_t len, fdy_status kind,
                                  int64_t line) {
  const char *path = scratch_file("bad.tiktoken", text, len);
  fdy_tokenizer *tok = (fdy_tokenizer *)&tok;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_load_tiktoken(path, &tok, &err), kind);
  assert_null(tok);
  assert_string_equal(err.name, path);
  assert_int_equal(err.line, line);
  assert_non_null(strstr(err.message, path));
}

static void test_bad_tiktoken(void **state) {
  (void)state;
  struct {
    int line;
    const char *with, *extra;
    int64_t error_line;
  } cases[] = {
      {2, "AQ=x 1", NULL, 2},     /* bad base64 character */
      {2, "AQ= 1", NULL, 2},      /* bad base64 length */
      {2, "AR== 1", NULL, 2},     /* non-zero padding bits */
      {3, "Ag==", NULL, 3},       /* missing rank */
      {3, "Ag== ", NULL, 3},      /* empty rank */
      {3, "Ag== 2x", NULL, 3},    /* not a number */
      {3, "Ag== -2", NULL, 3},    /* not a number */
      {4, "Aw== 1", NULL, 4},     /* duplicate rank */
      {4, "Ag== 3", NULL, 4},     /* duplicate token */
      {4, "Aw== 99999", NULL, 4}, /* rank out of range */
      {4, " 3", NULL, 4},         /* empty token */
      {0, NULL, "dGhl", 264},     /* truncated last line */
      {0, NULL, "dGhl 26", 264},  /* truncated rank: a duplicate */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = tiny_ranks(cases[i].line, cases[i].with, cases[i].extra);
    expect_tiktoken_error(text, strlen(text), FDY_ERR_FORMAT,
                          cases[i].error_line);
    free(text);
  } /* Rank 262 missing: 263 ranks, one of them 263. */
  char *text = tiny_ranks(263, "bmc= 263", NULL);
  expect_tiktoken_error(text, strlen(text), FDY_ERR_FORMAT, 263);
  free(text);
  text = tiny_ranks(1, "YWJj 0", NULL); /* byte 0 has no token */
  expect_tiktoken_error(text, strlen(text), FDY_ERR_FORMAT, -1);
  free(text);
  expect_tiktoken_error("", 0, FDY_ERR_FORMAT, -1);
  expect_tiktoken_error("\n\n", 2, FDY_ERR_FORMAT, -1);

  fdy_tokenizer *tok = NULL;
  fdy_error err;
  assert_int_equal(
      fdy_tokenizer_load_tiktoken("/nonexistent/tokenizer.model", &tok, &err),
      FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, "/nonexistent/tokenizer.model");
  assert_int_equal(fdy_tokenizer_load_tiktoken(work, &tok, &err), FDY_ERR_IO);
  assert_null(tok);
}

/* ---- bad tokenizer.json and tokenizer_config.json ---------------------- */

typedef void (*json_edit)(json_t *root);

static json_t *tiny_json(const char *name) {
  char path[1024];
  data_path(path, sizeof path, name);
  json_error_t jerr;
  json_t *root = json_load_file(path, 0, &jerr);
  assert_non_null(root);
  return root;
}

static json_t *model_of(json_t *root) {
  return json_object_get(root, "model");
}

static void set_type_wordpiece(json_t *r) {
  json_object_set_new(model_of(r), "type", json_string("WordPiece"));
}
static void set_type_number(json_t *r) {
  json_object_set_new(model_of(r), "type", json_integer(3));
}
static void drop_model(json_t *r) {
  json_object_del(r, "model");
}
static void set_vocab_array(json_t *r) {
  json_object_set_new(model_of(r), "vocab", json_array());
}
static void set_vocab_id_string(json_t *r) {
  json_object_set_new(json_object_get(model_of(r), "vocab"), "th",
                      json_string("256"));
}
static void set_vocab_id_negative(json_t *r) {
  json_object_set_new(json_object_get(model_of(r), "vocab"), "th",
                      json_integer(-1));
}
static void set_vocab_duplicate_id(json_t *r) {
  json_object_set_new(json_object_get(model_of(r), "vocab"), "th",
                      json_integer(257));
}
static void set_vocab_id_range(json_t *r) {
  json_object_set_new(json_object_get(model_of(r), "vocab"), "th",
                      json_integer(100000));
}
static void set_vocab_bad_alphabet(json_t *r) {
  json_t *vocab = json_object_get(model_of(r), "vocab");
  json_object_del(vocab, "th");
  json_object_set_new(vocab, "t h", json_integer(256));
}
static void set_merges_object(json_t *r) {
  json_object_set_new(model_of(r), "merges", json_object());
}
static void set_merge_unknown(json_t *r) {
  json_array_set_new(json_object_get(model_of(r), "merges"), 0,
                     json_string("tq h"));
}
static void set_merge_no_token(json_t *r) {
  json_array_set_new(json_object_get(model_of(r), "merges"), 0,
                     json_string("q q"));
}
static void set_merge_three(json_t *r) {
  json_array_set_new(json_object_get(model_of(r), "merges"), 0,
                     json_string("t h e"));
}
static void set_merge_number(json_t *r) {
  json_array_set_new(json_object_get(model_of(r), "merges"), 0,
                     json_integer(5));
}
static void set_merges_not_adjacent(json_t *r) {
  json_array_append_new(json_object_get(model_of(r), "merges"),
                        json_string("t h"));
}
static void set_normalizer(json_t *r) {
  json_object_set_new(r, "normalizer", json_pack("{s:s}", "type", "Lowercase"));
}
static void set_pre_tokenizer_whitespace(json_t *r) {
  json_object_set_new(r, "pre_tokenizer",
                      json_pack("{s:s}", "type", "Whitespace"));
}
static json_t *split_of(json_t *r) {
  return json_array_get(
      json_object_get(json_object_get(r, "pre_tokenizer"), "pretokenizers"), 0);
}
static void set_regex(json_t *r, const char *regex) {
  json_object_set_new(json_object_get(split_of(r), "pattern"), "Regex",
                      json_string(regex));
}
static void set_bad_regex(json_t *r) {
  set_regex(r, "(unclosed");
}
/* issue #31: a Split regex that matches the empty string, or that
 * backtracks catastrophically */
static void set_empty_regex(json_t *r) {
  set_regex(r, "\\p{L}*|x");
}
static void set_backtracking_regex(json_t *r) {
  set_regex(r, "(a+)+$|\\s+|\\S");
}
static void set_backtracking_regex2(json_t *r) {
  set_regex(r, "(?:\\w+\\s?)+!|.");
}
static void set_split_merged(json_t *r) {
  json_object_set_new(split_of(r), "behavior", json_string("MergedWithNext"));
}
static void set_decoder_null(json_t *r) {
  json_object_set_new(r, "decoder", json_null());
}
static void drop_decoder(json_t *r) {
  json_object_del(r, "decoder");
}
static void set_decoder_wordpiece(json_t *r) {
  json_object_set_new(r, "decoder", json_pack("{s:s}", "type", "WordPiece"));
}
/* issue #31: two special tokens of one spelling */
static void set_added_same_spelling(json_t *r) {
  json_t *added = json_object_get(r, "added_tokens");
  json_object_set(json_array_get(added, 4), "content",
                  json_object_get(json_array_get(added, 3), "content"));
}
/* issue #31: a special token spelled like a vocabulary token, another id */
static void set_added_vocab_spelling(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 3),
                      "content", json_string("th"));
}
/* an added token on a vocabulary id, spelled otherwise */
static void set_added_vocab_id(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 3),
                      "id", json_integer(256));
}
static void set_added_lstrip_string(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 3),
                      "lstrip", json_string("yes"));
}
static void set_byte_fallback(json_t *r) {
  json_object_set_new(model_of(r), "byte_fallback", json_true());
}
static void set_added_content_number(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 3),
                      "content", json_integer(1));
}
static void drop_added_token(json_t *r) {
  json_array_remove(json_object_get(r, "added_tokens"), 3);
}
static void set_added_id_range(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 3),
                      "id", json_integer(519));
}
static void drop_byte_token(json_t *r) {
  json_t *vocab = json_object_get(model_of(r), "vocab");
  json_object_del(vocab, "!");
  json_object_set_new(vocab, "!!", json_integer(33));
}
static void set_ignore_merges_string(json_t *r) {
  json_object_set_new(model_of(r), "ignore_merges", json_string("yes"));
}

/* SentencePiece-style edits, of tests/data/tokenizer/hf/llama2 unless
 * they name mistral */
static json_t *normalizer_step(json_t *r, size_t i) {
  return json_array_get(
      json_object_get(json_object_get(r, "normalizer"), "normalizers"), i);
}
static json_t *decoder_step(json_t *r, size_t i) {
  return json_array_get(
      json_object_get(json_object_get(r, "decoder"), "decoders"), i);
}
static void set_replace_regex(json_t *r) {
  json_object_set_new(normalizer_step(r, 1), "pattern",
                      json_pack("{s:s}", "Regex", "\\s"));
}
static void set_prepend_number(json_t *r) {
  json_object_set_new(normalizer_step(r, 0), "prepend", json_integer(1));
}
static void set_replace_long(json_t *r) {
  json_object_set_new(normalizer_step(r, 1), "content",
                      json_string("0123456789012345678901234567890123"));
}
static void set_replace_empty_pattern(json_t *r) {
  json_object_set_new(normalizer_step(r, 1), "pattern",
                      json_pack("{s:s}", "String", ""));
}
static void set_normalizer_lowercase(json_t *r) {
  json_object_set_new(normalizer_step(r, 0), "type", json_string("Lowercase"));
}
static void set_normalizers_object(json_t *r) {
  json_object_set_new(json_object_get(r, "normalizer"), "normalizers",
                      json_object());
}
static void set_five_normalizers(json_t *r) {
  json_t *list =
      json_object_get(json_object_get(r, "normalizer"), "normalizers");
  for (int i = 0; i < 3; i++) {
    json_array_append(list, json_array_get(list, 0));
  }
}
static void set_decoders_swapped(json_t *r) {
  json_t *list = json_object_get(json_object_get(r, "decoder"), "decoders");
  json_t *replace = json_incref(json_array_get(list, 0));
  json_array_remove(list, 0);
  json_array_insert_new(list, 1, replace);
}
static void set_strip_without_fuse(json_t *r) {
  json_array_remove(json_object_get(json_object_get(r, "decoder"), "decoders"),
                    2);
}
static void set_strip_stop(json_t *r) {
  json_object_set_new(decoder_step(r, 3), "stop", json_integer(1));
}
static void set_strip_content(json_t *r) {
  json_object_set_new(decoder_step(r, 3), "content", json_string("ab"));
}
static void set_strip_start(json_t *r) {
  json_object_set_new(decoder_step(r, 3), "start", json_integer(-1));
}
static void set_decoder_step_wordpiece(json_t *r) {
  json_object_set_new(decoder_step(r, 0), "type", json_string("WordPiece"));
}
static void set_decoders_object(json_t *r) {
  json_object_set_new(json_object_get(r, "decoder"), "decoders", json_object());
}
static void set_decoder_byte_level(json_t *r) {
  json_object_set_new(r, "decoder", json_pack("{s:s}", "type", "ByteLevel"));
}
static void set_decoder_metaspace_scheme(json_t *r) {
  json_object_set_new(r, "decoder",
                      json_pack("{s:s,s:s,s:s}", "type", "Metaspace",
                                "replacement", SPACE, "prepend_scheme", "x"));
}
static void drop_byte_token_0a(json_t *r) {
  json_object_del(json_object_get(model_of(r), "vocab"), "<0x0A>");
  json_object_set_new(json_object_get(model_of(r), "vocab"), "<0x0a>",
                      json_integer(13));
}
static void set_unk_missing(json_t *r) {
  json_object_set_new(model_of(r), "unk_token", json_string("<nope>"));
}
static void set_unk_number(json_t *r) {
  json_object_set_new(model_of(r), "unk_token", json_integer(0));
}
static void set_fuse_unk_string(json_t *r) {
  json_object_set_new(model_of(r), "fuse_unk", json_string("yes"));
}
static void set_byte_fallback_string(json_t *r) {
  json_object_set_new(model_of(r), "byte_fallback", json_string("yes"));
}
static void set_vocab_empty_token(json_t *r) {
  json_object_set_new(json_object_get(model_of(r), "vocab"), "",
                      json_integer(5));
  json_object_del(json_object_get(model_of(r), "vocab"), "<0x02>");
}
static json_t *pre_of(json_t *r) {
  return json_object_get(r, "pre_tokenizer");
}
static void set_metaspace_replacement(json_t *r) {
  json_object_set_new(pre_of(r), "replacement", json_string("ab"));
}
static void set_metaspace_scheme(json_t *r) {
  json_object_set_new(pre_of(r), "prepend_scheme", json_string("First"));
}
static void set_metaspace_no_prefix(json_t *r) {
  json_object_set_new(pre_of(r), "add_prefix_space", json_false());
}
static void set_metaspace_split_string(json_t *r) {
  json_object_set_new(pre_of(r), "split", json_string("yes"));
}
static void set_metaspace_then_digits(json_t *r) {
  json_t *meta = json_incref(pre_of(r));
  json_object_set_new(r, "pre_tokenizer",
                      json_pack("{s:s,s:[o,{s:s}]}", "type", "Sequence",
                                "pretokenizers", meta, "type", "Digits"));
}
static void set_pre_whitespace(json_t *r) {
  json_object_set_new(r, "pre_tokenizer",
                      json_pack("{s:s}", "type", "Whitespace"));
}
/* on the byte-level tiny file */
static void set_unk_byte_level(json_t *r) {
  json_object_set_new(model_of(r), "unk_token", json_string("th"));
}
static void set_decoder_metaspace(json_t *r) {
  json_object_set_new(
      r, "decoder",
      json_pack("{s:s,s:s}", "type", "Metaspace", "replacement", SPACE));
}

/* The file name (under tests/data/tokenizer) edited by edit is refused
 * with kind, naming the file in the message and entry in err->name. */
static void expect_json_error(const char *name, json_edit edit, fdy_status kind,
                              const char *entry) {
  json_t *root = tiny_json(name);
  edit(root);
  char path[512];
  snprintf(path, sizeof path, "%s/tokenizer.json", work);
  assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
  json_decref(root);
  fdy_tokenizer *tok = (fdy_tokenizer *)&tok;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err), kind);
  assert_null(tok);
  assert_string_equal(err.name, entry);
  assert_non_null(strstr(err.message, path));
}

static void test_bad_tokenizer_json(void **state) {
  (void)state;
  struct {
    json_edit edit;
    fdy_status kind;
    const char *entry;
  } cases[] = {
      {set_type_wordpiece, FDY_ERR_UNSUPPORTED, "model.type"},
      {set_type_number, FDY_ERR_SCHEMA, "model.type"},
      {drop_model, FDY_ERR_SCHEMA, "model"},
      {set_vocab_array, FDY_ERR_SCHEMA, "model.vocab"},
      {set_vocab_id_string, FDY_ERR_SCHEMA, "model.vocab[\"th\"]"},
      {set_vocab_id_negative, FDY_ERR_SCHEMA, "model.vocab[\"th\"]"},
      /* the later entry with id 257 is the duplicate */
      {set_vocab_duplicate_id, FDY_ERR_SCHEMA, "model.vocab[\"the\"]"},
      {set_vocab_id_range, FDY_ERR_SCHEMA, "model.vocab[\"th\"]"},
      {set_vocab_bad_alphabet, FDY_ERR_SCHEMA, "model.vocab[\"t h\"]"},
      {set_merges_object, FDY_ERR_SCHEMA, "model.merges"},
      {set_merge_unknown, FDY_ERR_SCHEMA, "model.merges[0]"},
      {set_merge_no_token, FDY_ERR_SCHEMA, "model.merges[0]"},
      {set_merge_three, FDY_ERR_SCHEMA, "model.merges[0]"},
      {set_merge_number, FDY_ERR_SCHEMA, "model.merges[0]"},
      {set_normalizer, FDY_ERR_UNSUPPORTED, "normalizer"},
      {set_pre_tokenizer_whitespace, FDY_ERR_UNSUPPORTED, "pre_tokenizer"},
      {set_byte_fallback, FDY_ERR_UNSUPPORTED, "model.byte_fallback"},
      {set_added_content_number, FDY_ERR_SCHEMA, "added_tokens[3]"},
      {set_bad_regex, FDY_ERR_UNSUPPORTED,
       "pre_tokenizer.pretokenizers[0].pattern"},
      {set_empty_regex, FDY_ERR_SCHEMA,
       "pre_tokenizer.pretokenizers[0].pattern"},
      {set_backtracking_regex, FDY_ERR_SCHEMA,
       "pre_tokenizer.pretokenizers[0].pattern"},
      {set_backtracking_regex2, FDY_ERR_SCHEMA,
       "pre_tokenizer.pretokenizers[0].pattern"},
      {set_split_merged, FDY_ERR_UNSUPPORTED,
       "pre_tokenizer.pretokenizers[0].behavior"},
      {set_decoder_null, FDY_ERR_SCHEMA, "decoder"},
      {drop_decoder, FDY_ERR_SCHEMA, "decoder"},
      {set_decoder_wordpiece, FDY_ERR_UNSUPPORTED, "decoder"},
      {set_added_same_spelling, FDY_ERR_SCHEMA, "added_tokens[4]"},
      {set_added_vocab_spelling, FDY_ERR_SCHEMA, "added_tokens[3]"},
      {set_added_vocab_id, FDY_ERR_SCHEMA, "added_tokens[3]"},
      {set_added_lstrip_string, FDY_ERR_SCHEMA, "added_tokens[3].lstrip"},
      {set_ignore_merges_string, FDY_ERR_SCHEMA, "model.ignore_merges"},
      /* an id missing shows as one out of range */
      {drop_added_token, FDY_ERR_SCHEMA, "added_tokens[254]"},
      {set_added_id_range, FDY_ERR_SCHEMA, "added_tokens[3]"},
      {set_unk_byte_level, FDY_ERR_UNSUPPORTED, "model.unk_token"},
      {set_decoder_metaspace, FDY_ERR_UNSUPPORTED, "decoder"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    expect_json_error("tiny/tokenizer.json", cases[i].edit, cases[i].kind,
                      cases[i].entry);
  }
  /* Hugging Face accepts these: merges of one token that are not next to
   * each other, a vocabulary without a single byte (left out of the text,
   * as Hugging Face does), an added token on its vocabulary id. */
  char path[512];
  snprintf(path, sizeof path, "%s/tokenizer.json", work);
  json_edit accepted[] = {set_merges_not_adjacent, drop_byte_token};
  for (size_t i = 0; i < 2; i++) {
    json_t *root = tiny_json("tiny/tokenizer.json");
    accepted[i](root);
    assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
    json_decref(root);
    fdy_tokenizer *tok = NULL;
    fdy_error err;
    assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err), FDY_OK);
    fdy_tokens ids = {0};
    encode(tok, "a!b", 3, 0, &ids);
    assert_int_equal(ids.count, i == 1 ? 2 : 3);
    fdy_tokens_free(&ids);
    fdy_tokenizer_destroy(tok);
  }
  /* A regex that passes the probes but backtracks catastrophically on
   * some text: encoding stops at PCRE2's match limit, naming the file. */
  json_t *root = tiny_json("tiny/tokenizer.json");
  set_regex(root, "(x+x+)+y|\\s+|\\S");
  assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
  json_decref(root);
  fdy_tokenizer *runaway = NULL;
  fdy_error rerr;
  assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &runaway, &rerr), FDY_OK);
  fdy_tokens none = {0};
  const char *xs = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
  assert_int_equal(
      fdy_tokenizer_encode(runaway, xs, strlen(xs), 0, &none, &rerr),
      FDY_ERR_UNSUPPORTED);
  assert_string_equal(rerr.name, path);
  assert_non_null(strstr(rerr.message, "limit"));
  fdy_tokens_free(&none);
  fdy_tokenizer_destroy(runaway);
  /* Truncated JSON: a parse error with its line. */
  char tiny[1024];
  data_path(tiny, sizeof tiny, "tiny/tokenizer.json");
  size_t len = 0;
  char *text = read_all(tiny, &len);
  scratch_file("tokenizer.json", text, len / 2);
  free(text);
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err),
                   FDY_ERR_PARSE);
  assert_true(err.line > 1);
  assert_string_equal(err.name, path);
  scratch_file("tokenizer.json", "[1, 2]", 6);
  assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err),
                   FDY_ERR_SCHEMA);
  assert_null(tok);
}

/* Every bad part of a SentencePiece-style file is refused naming it. */
static void test_bad_sentencepiece_json(void **state) {
  (void)state;
  static const char *const llama2 = "hf/llama2/tokenizer.json";
  static const char *const mistral = "hf/mistral/tokenizer.json";
  struct {
    const char *file;
    json_edit edit;
    fdy_status kind;
    const char *entry;
  } cases[] = {
      {llama2, set_replace_regex, FDY_ERR_UNSUPPORTED,
       "normalizer.normalizers[1].pattern"},
      {llama2, set_prepend_number, FDY_ERR_SCHEMA,
       "normalizer.normalizers[0].prepend"},
      {llama2, set_replace_long, FDY_ERR_UNSUPPORTED,
       "normalizer.normalizers[1].content"},
      {llama2, set_replace_empty_pattern, FDY_ERR_SCHEMA,
       "normalizer.normalizers[1].pattern"},
      {llama2, set_normalizer_lowercase, FDY_ERR_UNSUPPORTED,
       "normalizer.normalizers[0]"},
      {llama2, set_normalizers_object, FDY_ERR_SCHEMA,
       "normalizer.normalizers"},
      {llama2, set_five_normalizers, FDY_ERR_UNSUPPORTED,
       "normalizer.normalizers[4]"},
      {llama2, set_decoders_swapped, FDY_ERR_UNSUPPORTED,
       "decoder.decoders[1]"},
      {llama2, set_strip_without_fuse, FDY_ERR_UNSUPPORTED,
       "decoder.decoders[2]"},
      {llama2, set_strip_stop, FDY_ERR_UNSUPPORTED, "decoder.decoders[3].stop"},
      {llama2, set_strip_content, FDY_ERR_UNSUPPORTED,
       "decoder.decoders[3].content"},
      {llama2, set_strip_start, FDY_ERR_SCHEMA, "decoder.decoders[3].start"},
      {llama2, set_decoder_step_wordpiece, FDY_ERR_UNSUPPORTED,
       "decoder.decoders[0]"},
      {llama2, set_decoders_object, FDY_ERR_SCHEMA, "decoder.decoders"},
      {llama2, set_decoder_byte_level, FDY_ERR_UNSUPPORTED, "decoder"},
      {llama2, set_decoder_null, FDY_ERR_SCHEMA, "decoder"},
      {llama2, set_decoder_metaspace_scheme, FDY_ERR_SCHEMA,
       "decoder.prepend_scheme"},
      {llama2, drop_byte_token_0a, FDY_ERR_UNSUPPORTED, "model.byte_fallback"},
      {llama2, set_unk_missing, FDY_ERR_SCHEMA, "model.unk_token"},
      {llama2, set_unk_number, FDY_ERR_SCHEMA, "model.unk_token"},
      {llama2, set_fuse_unk_string, FDY_ERR_SCHEMA, "model.fuse_unk"},
      {llama2, set_byte_fallback_string, FDY_ERR_SCHEMA, "model.byte_fallback"},
      {llama2, set_vocab_empty_token, FDY_ERR_SCHEMA, "model.vocab[\"\"]"},
      {llama2, set_pre_whitespace, FDY_ERR_UNSUPPORTED, "pre_tokenizer"},
      {mistral, set_metaspace_replacement, FDY_ERR_SCHEMA,
       "pre_tokenizer.replacement"},
      {mistral, set_metaspace_scheme, FDY_ERR_SCHEMA,
       "pre_tokenizer.prepend_scheme"},
      {mistral, set_metaspace_no_prefix, FDY_ERR_SCHEMA,
       "pre_tokenizer.add_prefix_space"},
      {mistral, set_metaspace_split_string, FDY_ERR_SCHEMA,
       "pre_tokenizer.split"},
      {mistral, set_metaspace_then_digits, FDY_ERR_UNSUPPORTED,
       "pre_tokenizer.pretokenizers[0]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    expect_json_error(cases[i].file, cases[i].edit, cases[i].kind,
                      cases[i].entry);
  }
}

/* ---- SentencePiece-style details ---------------------------------------- */

/* Bytes that are not UTF-8: their <0xNN> token with byte_fallback (Llama
 * 2), else the unknown token, else nothing. */
static void test_sentencepiece_bytes(void **state) {
  (void)state;
  static const char *const names[] = {"llama2", "metaspace", "never"};
  for (size_t n = 0; n < 3; n++) {
    fdy_tokenizer *tok = load_fixture(names[n]);
    fdy_tokens a = {0}, ids = {0};
    encode(tok, "a", 1, 0, &a);
    encode(tok, "a\xff", 2, 0, &ids);
    assert_int_equal(ids.count, a.count + (n < 2));
    assert_memory_equal(ids.ids, a.ids, a.count * sizeof *a.ids);
    if (n == 0) {
      assert_int_equal(ids.ids[a.count], 3 + 0xFF); /* <0xFF> */
      assert_decodes_to(tok, &ids, "a\xff", 2);
    } else if (n == 1) {
      assert_int_equal(ids.ids[a.count], 0); /* <unk> */
    }
    fdy_tokens_free(&a);
    fdy_tokens_free(&ids);
    fdy_tokenizer_destroy(tok);
  }
}

static void assert_token_bytes(const fdy_tokenizer *tok, int32_t id,
                               const char *want) {
  const char *bytes = NULL;
  size_t len = 0;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_token_bytes(tok, id, &bytes, &len, &err),
                   FDY_OK);
  assert_int_equal(len, strlen(want));
  assert_memory_equal(bytes, want, len);
}

/* An id's bytes in the middle of a text: "\u2581" as a space, <0xNN> as its
 * byte with the ByteFallback decoder (as itself without it), a special
 * token as written, also when it is normalized. */
static void set_bos_normalized(json_t *r) {
  json_object_set_new(json_array_get(json_object_get(r, "added_tokens"), 1),
                      "normalized", json_true());
}

static void test_sentencepiece_token_bytes(void **state) {
  (void)state;
  fdy_tokenizer *llama2 = load_fixture("llama2");
  fdy_tokenizer *metaspace = load_fixture("metaspace");
  fdy_tokens ids = {0};
  encode(llama2, " ,", 2, 0, &ids); /* "\u2581", "\u2581," */
  assert_int_equal(ids.count, 2);
  assert_token_bytes(llama2, ids.ids[0], " ");
  assert_token_bytes(llama2, ids.ids[1], " ,");
  assert_token_bytes(llama2, 3 + 'A', "A");
  assert_token_bytes(metaspace, 3 + 'A', "<0x41>");
  assert_token_bytes(llama2, 1, "<s>");
  fdy_tokens_free(&ids);
  fdy_tokenizer_destroy(llama2);
  fdy_tokenizer_destroy(metaspace);
  char from[1024], path[512];
  snprintf(from, sizeof from, "%s/tokenizer/hf/llama2/tokenizer.json",
           data_root);
  snprintf(path, sizeof path, "%s/tokenizer.json", work);
  json_error_t jerr;
  json_t *root = json_load_file(from, 0, &jerr);
  assert_non_null(root);
  set_bos_normalized(root);
  assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
  json_decref(root);
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err), FDY_OK);
  assert_token_bytes(tok, 1, "<s>");
  assert_int_equal(fdy_tokenizer_special_id(tok, "<s>"), 1);
  fdy_tokenizer_destroy(tok);
}

/* Forms that Hugging Face reads as the fixtures' own give the fixtures'
 * ids: Metaspace with the older add_prefix_space and no split (always,
 * split), Metaspace as the one entry of a Sequence, its decoder likewise,
 * the merges as pairs. */
static void set_metaspace_legacy(json_t *r) {
  json_object_set_new(r, "pre_tokenizer",
                      json_pack("{s:s,s:s,s:b}", "type", "Metaspace",
                                "replacement", SPACE, "add_prefix_space", 1));
}
static void set_metaspace_sequence(json_t *r) {
  json_t *meta = json_incref(json_object_get(r, "pre_tokenizer"));
  json_object_set_new(
      r, "pre_tokenizer",
      json_pack("{s:s,s:[o]}", "type", "Sequence", "pretokenizers", meta));
}
static void set_decoder_sequence(json_t *r) {
  json_t *dec = json_incref(json_object_get(r, "decoder"));
  json_object_set_new(
      r, "decoder",
      json_pack("{s:s,s:[o]}", "type", "Sequence", "decoders", dec));
}
static void set_pair_merges(json_t *r) {
  json_t *merges = json_object_get(model_of(r), "merges");
  for (size_t i = 0; i < json_array_size(merges); i++) {
    const char *m = json_string_value(json_array_get(merges, i));
    const char *space = strchr(m, ' ');
    json_array_set_new(merges, i,
                       json_pack("[s#s]", m, (int)(space - m), space + 1));
  }
}

/* ignore_merges: a piece that is a token is that token, though no merge
 * makes it (Hugging Face: [956] with it, [356, 327, 318] without). */
static void add_unmergeable_token(json_t *r) {
  json_object_set_new(json_object_get(model_of(r), "vocab"), SPACE "zq",
                      json_integer(956));
}
static void set_unmergeable_no_ignore(json_t *r) {
  add_unmergeable_token(r);
  json_object_set_new(model_of(r), "ignore_merges", json_false());
}

static void test_sentencepiece_ignore_merges(void **state) {
  (void)state;
  json_edit edits[] = {add_unmergeable_token, set_unmergeable_no_ignore};
  const int32_t with[] = {956}, without[] = {356, 327, 318};
  for (int i = 0; i < 2; i++) {
    char from[1024], path[512];
    snprintf(from, sizeof from, "%s/tokenizer/hf/metaspace/tokenizer.json",
             data_root);
    snprintf(path, sizeof path, "%s/tokenizer.json", work);
    json_error_t jerr;
    json_t *root = json_load_file(from, 0, &jerr);
    assert_non_null(root);
    edits[i](root);
    assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
    json_decref(root);
    fdy_tokenizer *tok = NULL;
    fdy_error err;
    assert_int_equal(fdy_tokenizer_load_hf(path, NULL, &tok, &err), FDY_OK);
    fdy_tokens ids = {0};
    encode(tok, "zq", 2, 0, &ids);
    assert_int_equal(ids.count, i == 0 ? 1 : 3);
    assert_memory_equal(ids.ids, i == 0 ? with : without,
                        ids.count * sizeof *ids.ids);
    fdy_tokens_free(&ids);
    fdy_tokenizer_destroy(tok);
  }
}

static void test_sentencepiece_forms(void **state) {
  (void)state;
  struct {
    const char *name;
    json_edit edit;
  } cases[] = {
      {"metaspace", set_metaspace_legacy},
      {"mistral", set_metaspace_sequence},
      {"metaspace", set_decoder_sequence},
      {"llama2", set_pair_merges},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char from[1024], path[512];
    snprintf(from, sizeof from, "%s/tokenizer/hf/%s/tokenizer.json", data_root,
             cases[i].name);
    snprintf(path, sizeof path, "%s/tokenizer.json", work);
    json_error_t jerr;
    json_t *root = json_load_file(from, 0, &jerr);
    assert_non_null(root);
    cases[i].edit(root);
    assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
    json_decref(root);
    fdy_tokenizer *tok = NULL;
    fdy_error err;
    if (fdy_tokenizer_load_hf(path, NULL, &tok, &err) != FDY_OK) {
      fail_msg("%s: %s", cases[i].name, err.message);
    }
    assert_true(check_fixture(tok, cases[i].name) > 100);
    fdy_tokenizer_destroy(tok);
  }
}

static void set_bos_unknown(json_t *r) {
  json_object_set_new(r, "bos_token", json_string("<s>"));
}
static void set_eos_number(json_t *r) {
  json_object_set_new(r, "eos_token", json_integer(2));
}
static void set_bos_object(json_t *r) {
  json_object_set_new(r, "bos_token",
                      json_pack("{s:s}", "content", "<|end_of_text|>"));
}
static void set_decoder_mismatch(json_t *r) {
  json_object_set_new(
      json_object_get(json_object_get(r, "added_tokens_decoder"), "263"),
      "content", json_string("<|other|>"));
}
static void set_decoder_bad_id(json_t *r) {
  json_object_set_new(json_object_get(r, "added_tokens_decoder"), "12x",
                      json_pack("{s:s}", "content", "a"));
}
static void set_chat_template_list(json_t *r) {
  json_object_set_new(r, "chat_template", json_array());
}

static void test_bad_config(void **state) {
  (void)state;
  char json_path[1024], path[512];
  data_path(json_path, sizeof json_path, "tiny/tokenizer.json");
  snprintf(path, sizeof path, "%s/tokenizer_config.json", work);
  struct {
    json_edit edit;
    fdy_status kind;
    const char *entry;
  } cases[] = {
      {set_bos_unknown, FDY_ERR_SCHEMA, "bos_token"},
      {set_eos_number, FDY_ERR_SCHEMA, "eos_token"},
      {set_decoder_mismatch, FDY_ERR_SCHEMA, "added_tokens_decoder[\"263\"]"},
      {set_decoder_bad_id, FDY_ERR_SCHEMA, "added_tokens_decoder[\"12x\"]"},
      {set_chat_template_list, FDY_ERR_UNSUPPORTED, "chat_template"},
  };
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *root = tiny_json("tiny/tokenizer_config.json");
    cases[i].edit(root);
    assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
    json_decref(root);
    assert_int_equal(fdy_tokenizer_load_hf(json_path, path, &tok, &err),
                     cases[i].kind);
    assert_null(tok);
    assert_string_equal(err.name, cases[i].entry);
    assert_non_null(strstr(err.message, path));
  }
  json_t *root = tiny_json("tiny/tokenizer_config.json");
  set_bos_object(root);
  assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
  json_decref(root);
  assert_int_equal(fdy_tokenizer_load_hf(json_path, path, &tok, &err), FDY_OK);
  assert_int_equal(fdy_tokenizer_bos(tok), 264);
  fdy_tokenizer_destroy(tok);
}

/* ---- finding the tokenizer -------------------------------------------- */

static void copy_file(const char *from, const char *to) {
  size_t len = 0;
  char *text = read_all(from, &len);
  write_all(to, text, len);
  free(text);
}

static void test_open(void **state) {
  (void)state;
  char dir[512], tiny[1024], json_path[1024], config_path[1024], dst[1024];
  snprintf(dir, sizeof dir, "%s/model", work);
  assert_int_equal(mkdir(dir, 0700), 0);
  data_path(tiny, sizeof tiny, "tiny.tiktoken");
  data_path(json_path, sizeof json_path, "tiny/tokenizer.json");
  data_path(config_path, sizeof config_path, "tiny/tokenizer_config.json");
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  /* Nothing there. */
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_ERR_NOT_FOUND);
  assert_non_null(strstr(err.message, "tokenizer.json"));
  assert_non_null(strstr(err.message, "tokenizer.model"));
  /* A tiktoken tokenizer.model. */
  snprintf(dst, sizeof dst, "%s/tokenizer.model", dir);
  copy_file(tiny, dst);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_string_equal(fdy_tokenizer_source(tok), dst);
  fdy_tokenizer_destroy(tok);
  /* tokenizer.json wins, with its config beside it. */
  snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
  copy_file(json_path, dst);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_string_equal(fdy_tokenizer_source(tok), dst);
  assert_null(fdy_tokenizer_chat_template(tok));
  fdy_tokenizer_destroy(tok);
  snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
  copy_file(config_path, dst);
  assert_int_equal(fdy_tokenizer_open(dir, &tok, &err), FDY_OK);
  assert_non_null(fdy_tokenizer_chat_template(tok));
  assert_int_equal(fdy_tokenizer_eos(tok), 263 + 9);
  fdy_tokenizer_destroy(tok);
  /* A file: told by its first byte. */
  assert_int_equal(fdy_tokenizer_open(json_path, &tok, &err), FDY_OK);
  assert_non_null(fdy_tokenizer_chat_template(tok));
  fdy_tokenizer_destroy(tok);
  assert_int_equal(fdy_tokenizer_open(tiny, &tok, &err), FDY_OK);
  assert_int_equal(fdy_tokenizer_vocab_size(tok), 263 + 256);
  fdy_tokenizer_destroy(tok);
  assert_int_equal(fdy_tokenizer_open("/nonexistent", &tok, &err),
                   FDY_ERR_NOT_FOUND);
  assert_null(tok);
  const char *names[] = {"tokenizer.model", "tokenizer.json",
                         "tokenizer_config.json"};
  for (int i = 0; i < 3; i++) {
    snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
    unlink(dst);
  }
  assert_int_equal(rmdir(dir), 0);
}

static int remove_work(void **state) {
  (void)state;
  const char *names[] = {"bad.tiktoken", "tokenizer.json",
                         "tokenizer_config.json"};
  for (int i = 0; i < 3; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", work, names[i]);
    unlink(path);
  }
  return rmdir(work);
}

int main(void) {
  data_root = getenv("FOUNDRY_TEST_DATA");
  if (!data_root) {
    fprintf(stderr, "FOUNDRY_TEST_DATA is not set\n");
    return 1;
  }
  char ranks[1024];
  data_path(ranks, sizeof ranks, "llama3-tokenizer.model");
  fdy_error err;
  if (fdy_tokenizer_load_tiktoken(ranks, &llama3, &err) != FDY_OK) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  snprintf(work, sizeof work, "/tmp/fdy_tokenizer_test_XXXXXX");
  if (!mkdtemp(work)) {
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_readme_vector),
      cmocka_unit_test(test_corpus),
      cmocka_unit_test(test_random_bytes_round_trip),
      cmocka_unit_test(test_invalid_utf8),
      cmocka_unit_test(test_special_tokens),
      cmocka_unit_test(test_stream),
      cmocka_unit_test(test_decode_errors),
      cmocka_unit_test(test_tiny_json_matches_tiktoken),
      cmocka_unit_test(test_hf_reference),
      cmocka_unit_test(test_sentencepiece_bytes),
      cmocka_unit_test(test_sentencepiece_forms),
      cmocka_unit_test(test_sentencepiece_token_bytes),
      cmocka_unit_test(test_sentencepiece_ignore_merges),
      cmocka_unit_test(test_bad_tiktoken),
      cmocka_unit_test(test_bad_tokenizer_json),
      cmocka_unit_test(test_bad_sentencepiece_json),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_open),
  };
  int failed = cmocka_run_group_tests(tests, NULL, remove_work);
  fdy_tokenizer_destroy(llama3);
  return failed;
}

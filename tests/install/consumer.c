/* A program outside the project, built against the installed libfoundry
 * through pkg-config (test_install.sh): it opens a checkpoint, runs a
 * session on the CPU backend and prints the greedy ids of a prompt as
 * `foundry generate` does ("ids: 1,2,3").
 * usage: consumer MODEL_DIR PROMPT_IDS MAX_TOKENS  (PROMPT_IDS: "1,2,3") */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <foundry/core.h>
#include <foundry/cpu.h>
#include <foundry/llama.h>
#include <foundry/llama_session.h>

#define MAX_PROMPT 64

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer MODEL_DIR PROMPT_IDS MAX_TOKENS\n");
    return 2;
  }
  int32_t prompt[MAX_PROMPT];
  uint32_t prompt_count = 0;
  for (char *s = argv[2]; *s != '\0' && prompt_count < MAX_PROMPT;) {
    char *end;
    prompt[prompt_count++] = (int32_t)strtol(s, &end, 10);
    s = *end == ',' ? end + 1 : end;
  }
  fdy_llama_model *model = NULL;
  fdy_backend *backend = NULL;
  fdy_llama_session *session = NULL;
  fdy_llama_generation gen = {0};
  fdy_error err = {0};
  int rc = 1;
  printf("libfoundry %s\n", fdy_version());
  if (fdy_llama_open(argv[1], &model, &err) != FDY_OK) {
    goto cleanup;
  }
  fdy_cpu_options cpu = {.threads = 2};
  if (fdy_cpu_backend_create(&cpu, &backend, &err) != FDY_OK) {
    goto cleanup;
  }
  fdy_llama_session_options options = {.backend = backend, .context = 64};
  if (fdy_llama_session_create(model, &options, &session, &err) != FDY_OK) {
    goto cleanup;
  }
  fdy_llama_generate_options generate = {.max_tokens = (uint32_t)atoi(argv[3]),
                                         .ignore_eos = true};
  if (fdy_llama_generate(session, prompt, prompt_count, &generate, &gen,
                         &err) != FDY_OK) {
    goto cleanup;
  }
  printf("ids: ");
  for (uint32_t i = 0; i < gen.count; i++) {
    printf("%s%d", i > 0 ? "," : "", (int)gen.ids[i]);
  }
  printf("\n");
  rc = 0;
cleanup:
  if (rc != 0) {
    fprintf(stderr, "consumer: %s: %s\n", fdy_status_name(err.kind),
            err.message);
  }
  fdy_llama_generation_free(&gen);
  fdy_llama_session_destroy(session);
  fdy_backend_destroy(backend);
  fdy_llama_close(model);
  return rc;
}

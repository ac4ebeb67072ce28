/* libFuzzer target: the run configuration. The input up to its first NUL byte is the YAML text (loaded
 * over the defaults, validated, printed); each line after that NUL is a `key.path=value` override applied
 * to the loaded config, which is then validated again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!sink) sink = fopen("/dev/null", "w");
  const uint8_t *nul = memchr(data, 0, size);
  size_t yaml_size = nul ? (size_t)(nul - data) : size;
  char *text = malloc(yaml_size + 1); /* NUL-terminated, as mtf_yaml_read_file gives it */
  if (!text) return 0;
  memcpy(text, data, yaml_size);
  text[yaml_size] = '\0';

  mtf_config *cfg = malloc(sizeof *cfg);
  if (!cfg) {
    free(text);
    return 0;
  }
  mtf_error err;
  mtf_config_defaults(cfg);
  int loaded = mtf_config_load_text(cfg, text, yaml_size, "fuzz.yaml", &err) == MTF_OK;
  if (loaded && mtf_config_validate(cfg, &err) == MTF_OK && sink) mtf_config_print(cfg, sink);

  if (loaded && nul) {
    const char *p = (const char *)nul + 1, *end = (const char *)data + size;
    while (p < end) {
      const char *eol = memchr(p, '\n', (size_t)(end - p));
      size_t n = eol ? (size_t)(eol - p) : (size_t)(end - p);
      char *line = malloc(n + 1);
      if (!line) break;
      memcpy(line, p, n);
      line[n] = '\0';
      mtf_config_set(cfg, line, &err);
      free(line);
      p += n + 1;
    }
    if (mtf_config_validate(cfg, &err) == MTF_OK && sink) mtf_config_print(cfg, sink);
  }
  free(cfg);
  free(text);
  return 0;
}

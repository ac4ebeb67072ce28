/* The progress line and metrics.jsonl (see metrics.h). */
#include "run/metrics.h"

#include "core/clock.h"
#include "core/paths.h"

#include <errno.h>
#include <math.h>
#include <string.h>

FILE *mtf_metrics_open(const mtf_config *cfg, int rank, int64_t steps_done, mtf_error *err) {
  if (rank != 0) return NULL;
  char path[MTF_CONFIG_PATH + 32], kept[MTF_CONFIG_PATH + 48];
  snprintf(path, sizeof path, "%s/config.yaml", cfg->run_dir);
  /* A link planted at config.yaml or metrics.jsonl is replaced, never followed out of the run directory. */
  mtf_error ignored;
  FILE *f = mtf_create_file_nofollow(path, &ignored);
  if (f) {
    mtf_config_print(cfg, f);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->run_dir);
  snprintf(kept, sizeof kept, "%s.previous", path);
  if (rename(path, kept) != 0 && errno != ENOENT) {
    mtf_error_set(err, MTF_ERR_IO, "cannot rename '%s': %s", path, strerror(errno));
    return NULL;
  }
  FILE *metrics = mtf_create_file_nofollow(path, err);
  if (!metrics) return NULL;
  FILE *old = steps_done > 0 ? fopen(kept, "r") : NULL;
  char line[1024];
  long long step;
  while (old && fgets(line, sizeof line, old))
    if (sscanf(line, "{\"step\": %lld", &step) == 1 && step <= steps_done) fputs(line, metrics);
  if (old) {
    fclose(old);
    remove(kept);
  }
  fflush(metrics);
  return metrics;
}

void mtf_metrics_report(int rank, FILE *metrics, const mtf_step_report *r) {
  if (rank != 0) return;
  char eta[32];
  mtf_format_duration(r->eta_s, eta, sizeof eta);
  printf("step %6lld  loss %.4f  lr %.3e  grad_norm %.3f  %8.0f tok/s  %7.1f ms/step  MFU %5.1f%%  comm %4.1f%%"
         "  ETA %s\n",
         (long long)r->step, r->loss, r->learning_rate, r->grad_norm, r->tokens_per_s, r->step_ms, 100 * r->mfu,
         100 * r->comm_frac, eta);
  fflush(stdout);
  if (!metrics) return;
  fprintf(metrics,
          "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.6g, "
          "\"step_ms\": %.6g, \"mfu\": %.6g, \"comm_frac\": %.6g, \"eta_s\": %.6g",
          (long long)r->step, r->loss, r->learning_rate, r->grad_norm, r->tokens_per_s, r->step_ms, r->mfu,
          r->comm_frac, r->eta_s);
  if (r->has_eval)
    fprintf(metrics, ", \"eval_loss\": %.9g, \"eval_perplexity\": %.9g, \"eval_tokens\": %lld", r->eval_loss,
            exp(r->eval_loss), (long long)r->eval_tokens);
  if (r->has_eval && r->has_dropless) fprintf(metrics, ", \"eval_dropless_loss\": %.9g", r->eval_dropless_loss);
  for (int i = 0; i < r->n_moe; i++)
    fprintf(metrics, "%s{\"layer\": %d, \"dropped\": %.6g, \"max_load\": %.6g, \"aux_loss\": %.9g}%s",
            i ? ", " : ", \"moe\": [", r->moe[i].layer, r->moe[i].dropped, r->moe[i].max_load, r->moe[i].aux_loss,
            i == r->n_moe - 1 ? "]" : "");
  fputs("}\n", metrics);
  fflush(metrics);
}

void mtf_metrics_close(FILE *metrics) {
  if (metrics) fclose(metrics);
}

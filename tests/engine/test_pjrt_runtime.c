/* The PJRT runtime on the XLA CPU plugin: a client with 2 (and 4) devices, a StableHLO module with an
 * all_reduce over replicas, f32 and i32 buffers up and down, a donated argument, and the load errors.
 * Expected values are computed here from the inputs (the sum over replicas; replica ids), not copied from
 * a run. Usage: test_pjrt_runtime [--no-get-api LIB] [--old-api LIB] (the two fake plugins CMake builds). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "exec/pjrt/runtime.h"

/* out0 = sum over replicas of x; out1 = k + replica_id (i32); out2 = seed + replica_id (u64); x is donated
 * to out0. */
static const char *module_text =
    "module @allreduce attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {\n"
    "  func.func public @main(%x: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}, %k: tensor<4xi32>,\n"
    "                       %seed: tensor<ui64>) -> (tensor<2x3xf32>, tensor<4xi32>, tensor<ui64>) {\n"
    "    %sum = \"stablehlo.all_reduce\"(%x) ({\n"
    "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
    "      %s = stablehlo.add %a, %b : tensor<f32>\n"
    "      stablehlo.return %s : tensor<f32>\n"
    "    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n"
    "    %r = stablehlo.replica_id : tensor<ui32>\n"
    "    %ri = stablehlo.convert %r : (tensor<ui32>) -> tensor<i32>\n"
    "    %rb = stablehlo.broadcast_in_dim %ri, dims = [] : (tensor<i32>) -> tensor<4xi32>\n"
    "    %y = stablehlo.add %k, %rb : tensor<4xi32>\n"
    "    %r64 = stablehlo.convert %r : (tensor<ui32>) -> tensor<ui64>\n"
    "    %s2 = stablehlo.add %seed, %r64 : tensor<ui64>\n"
    "    return %sum, %y, %s2 : tensor<2x3xf32>, tensor<4xi32>, tensor<ui64>\n"
    "  }\n"
    "}\n";

static void test_all_reduce(void) {
  mtf_error err = {0};
  mtf_pjrt_runtime *rt = NULL;
  mtf_pjrt_options options = {.local_devices = 2};
  int rc = mtf_pjrt_open(&options, &rt, &err);
  if (rc != MTF_OK) fprintf(stderr, "open: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  if (!rt) return;
  CHECK(mtf_pjrt_device_count(rt) == 2);
  CHECK(strcmp(mtf_pjrt_platform_name(rt), "cpu") == 0);
  CHECK(mtf_pjrt_device_id(rt, 0) != mtf_pjrt_device_id(rt, 1));
  char text[2048];
  mtf_pjrt_describe(rt, text, sizeof text);
  CHECK_CONTAINS(text, "pjrt platform: cpu", "pjrt devices: 2", "PJRT C API 0.");
  printf("%s\n", text);

  mtf_pjrt_executable *exe = NULL;
  rc = mtf_pjrt_compile(rt, module_text, strlen(module_text), 2, 1, &exe, &err);
  if (rc != MTF_OK) fprintf(stderr, "compile: %s\n", err.msg);
  CHECK(rc == MTF_OK);
  if (exe) {
    CHECK(mtf_pjrt_executable_num_outputs(exe) == 3);
    CHECK(mtf_pjrt_executable_num_devices(exe) == 2);
    float x[2][6];
    int32_t k[2][4];
    for (int d = 0; d < 2; d++) {
      for (int i = 0; i < 6; i++) x[d][i] = (float)(i + 1) * (d ? -0.25f : 1.5f) + (float)d;
      for (int i = 0; i < 4; i++) k[d][i] = 100 * (d + 1) + i;
    }
    int64_t xdims[2] = {2, 3}, kdims[1] = {4};
    uint64_t seed = (1ull << 40) + 7; /* above 32 bits: a u64 all the way */
    mtf_pjrt_buffer *args[6] = {0};
    for (int d = 0; d < 2; d++) {
      CHECK(mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_F32, xdims, 2, x[d], &args[d * 3], &err) == MTF_OK);
      CHECK(mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_S32, kdims, 1, k[d], &args[d * 3 + 1], &err) == MTF_OK);
      CHECK(mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_U64, NULL, 0, &seed, &args[d * 3 + 2], &err) == MTF_OK);
    }
    CHECK(mtf_pjrt_buffer_host_bytes(rt, args[0], &err) == sizeof x[0]);
    mtf_pjrt_buffer *outs[6] = {0};
    rc = mtf_pjrt_execute(rt, exe, 3, args, NULL, outs, &err);
    if (rc != MTF_OK) fprintf(stderr, "execute: %s\n", err.msg);
    CHECK(rc == MTF_OK);
    for (int d = 0; rc == MTF_OK && d < 2; d++) {
      float sum[6];
      int32_t y[4];
      uint64_t s2 = 0;
      CHECK(mtf_pjrt_buffer_to_host(rt, outs[d * 3], sum, sizeof sum, &err) == MTF_OK);
      CHECK(mtf_pjrt_buffer_to_host(rt, outs[d * 3 + 1], y, sizeof y, &err) == MTF_OK);
      CHECK(mtf_pjrt_buffer_to_host(rt, outs[d * 3 + 2], &s2, sizeof s2, &err) == MTF_OK);
      for (int i = 0; i < 6; i++) CHECK(sum[i] == x[0][i] + x[1][i]); /* two terms: exact in either order */
      for (int i = 0; i < 4; i++) CHECK(y[i] == k[d][i] + d);
      CHECK(s2 == seed + (uint64_t)d);
      /* A wrong size is an error, not a partial copy. */
      CHECK(mtf_pjrt_buffer_to_host(rt, outs[d * 3], sum, sizeof sum - 4, &err) == MTF_ERR_INVALID);
      /* x was donated to out0: reading it is an error from the plugin, not stale data. */
      CHECK(mtf_pjrt_buffer_to_host(rt, args[d * 3], sum, sizeof sum, &err) != MTF_OK);
      CHECK(mtf_pjrt_buffer_to_host(rt, args[d * 3 + 1], y, sizeof y, &err) == MTF_OK);
    }
    for (int i = 0; i < 6; i++) {
      mtf_pjrt_buffer_destroy(rt, args[i]);
      mtf_pjrt_buffer_destroy(rt, outs[i]);
    }
    /* Kept (not donated) arguments can run again and still be read afterwards. */
    for (int d = 0; d < 2; d++) {
      CHECK(mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_F32, xdims, 2, x[d], &args[d * 3], &err) == MTF_OK);
      CHECK(mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_S32, kdims, 1, k[d], &args[d * 3 + 1], &err) == MTF_OK);
      CHECK(mtf_pjrt_buffer_from_host(rt, d, MTF_PJRT_U64, NULL, 0, &seed, &args[d * 3 + 2], &err) == MTF_OK);
    }
    unsigned char keep[3] = {1, 1, 1};
    CHECK(mtf_pjrt_execute(rt, exe, 3, args, keep, outs, &err) == MTF_OK);
    float again[6];
    CHECK(mtf_pjrt_buffer_to_host(rt, args[3], again, sizeof again, &err) == MTF_OK);
    for (int i = 0; i < 6; i++) CHECK(again[i] == x[1][i]);
    for (int i = 0; i < 6; i++) {
      mtf_pjrt_buffer_destroy(rt, args[i]);
      mtf_pjrt_buffer_destroy(rt, outs[i]);
    }
    mtf_pjrt_executable_destroy(rt, exe);
  }
  /* More replicas than devices: a clear error before the plugin sees it. */
  exe = NULL;
  CHECK(mtf_pjrt_compile(rt, module_text, strlen(module_text), 4, 1, &exe, &err) == MTF_ERR_MESH);
  CHECK_CONTAINS(err.msg, "4 replicas", "has 2", "backend.local_devices");
  /* A module that does not parse: the plugin's message comes back. */
  const char *bad = "module { this is not stablehlo }";
  CHECK(mtf_pjrt_compile(rt, bad, strlen(bad), 1, 1, &exe, &err) != MTF_OK);
  CHECK_CONTAINS(err.msg, "PJRT compilation of the StableHLO module failed");
  CHECK(exe == NULL);
  mtf_pjrt_close(rt);

  /* A second client in the same process, with 4 devices. */
  options.local_devices = 4;
  rc = mtf_pjrt_open(&options, &rt, &err);
  CHECK(rc == MTF_OK);
  if (rt) {
    CHECK(mtf_pjrt_device_count(rt) == 4);
    mtf_pjrt_close(rt);
  }
}

static void test_load_errors(const char *no_get_api, const char *old_api) {
  mtf_error err = {0};
  mtf_pjrt_runtime *rt = NULL;
  mtf_pjrt_options options = {.plugin_path = "/nonexistent/xla_cpu_pjrt.so", .local_devices = 1};
  CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_ERR_IO);
  CHECK_CONTAINS(err.msg, "/nonexistent/xla_cpu_pjrt.so", "not found", MTF_PJRT_CPU_PACKAGE, "backend.plugin",
                 MTF_PJRT_PLUGIN_ENV);
  CHECK(rt == NULL);
  /* A file that is not a shared object (this test's source's directory has none; /etc/hostname is text). */
  options.plugin_path = "/etc/passwd";
  CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "could not be loaded as a shared object", MTF_PJRT_CPU_PACKAGE);
  if (no_get_api) {
    options.plugin_path = no_get_api;
    CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_ERR_INVALID);
    CHECK_CONTAINS(err.msg, "no GetPjrtApi symbol", "backend.plugin");
  }
  if (old_api) {
    options.plugin_path = old_api;
    CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_ERR_INVALID);
    CHECK_CONTAINS(err.msg, "API version 0.1;", "needs 0.");
  }
  options.local_devices = -1;
  options.plugin_path = NULL;
  CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_ERR_INVALID);
  CHECK_CONTAINS(err.msg, "backend.local_devices");
  /* Nothing named anywhere, and no built-in default: the message names the package and both settings. */
  char path[256];
  unsetenv(MTF_PJRT_PLUGIN_ENV);
  if (!mtf_pjrt_default_plugin()[0]) {
    CHECK(mtf_pjrt_resolve_plugin(NULL, path, sizeof path, &err) == MTF_ERR_INVALID);
    CHECK_CONTAINS(err.msg, MTF_PJRT_CPU_PACKAGE, "backend.plugin", MTF_PJRT_PLUGIN_ENV);
  }
  setenv(MTF_PJRT_PLUGIN_ENV, "/from/env.so", 1);
  CHECK(mtf_pjrt_resolve_plugin("", path, sizeof path, &err) == MTF_OK && strcmp(path, "/from/env.so") == 0);
  CHECK(mtf_pjrt_resolve_plugin("/set.so", path, sizeof path, &err) == MTF_OK && strcmp(path, "/set.so") == 0);
  unsetenv(MTF_PJRT_PLUGIN_ENV);
}

static int threads_of_this_process(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* The plugin's pools are sized by $PJRT_NPROC at client creation: mtf sets it for its programs'
 * collectives (mtf_pjrt_threads_needed), only then, and never over a value the user exported. The threads
 * the client starts (two pools of that size, created eagerly) show that the value reached the plugin. */
static void test_thread_pool(void) {
  /* The rule: cores, plus devices - 1 threads per collective (each may hold that many blocked). */
  CHECK(mtf_pjrt_threads_needed(1, 47, 2) == 2);
  CHECK(mtf_pjrt_threads_needed(2, 0, 2) == 2);
  CHECK(mtf_pjrt_threads_needed(2, 6, 2) == 8);
  CHECK(mtf_pjrt_threads_needed(4, 10, 16) == 46);
  CHECK(mtf_pjrt_threads_needed(2, 6, 0) == 7);
  unsetenv(MTF_PJRT_THREADS_ENV);
  unsetenv("NPROC");
  mtf_error err = {0};
  int deltas[2] = {0, 0};
  const int asked[2] = {0, 40};
  for (int i = 0; i < 2; i++) {
    mtf_pjrt_runtime *rt = NULL;
    mtf_pjrt_options options = {.local_devices = 2, .threads = asked[i]};
    int before = threads_of_this_process();
    CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_OK);
    if (!rt) return;
    deltas[i] = threads_of_this_process() - before;
    CHECK(mtf_pjrt_threads(rt) == asked[i]);
    CHECK(mtf_pjrt_threads_set(rt) == asked[i]);
    CHECK(getenv(MTF_PJRT_THREADS_ENV) == NULL); /* taken away again after the client's creation */
    char text[2048];
    mtf_pjrt_describe(rt, text, sizeof text);
    CHECK((strstr(text, "pjrt threads: 40") != NULL) == (asked[i] == 40));
    mtf_pjrt_close(rt);
  }
  /* 40 instead of max(cores, 2) in each of the plugin's two pools. */
  printf("threads started by a 2-device client: %d by default, %d with 40 asked for\n", deltas[0], deltas[1]);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long default_pool = cores > 2 ? cores : 2;
  if (default_pool < 40) CHECK(deltas[1] - deltas[0] >= 40 - default_pool);
  /* The user's value wins, and mtf reports it as the user's. */
  setenv(MTF_PJRT_THREADS_ENV, "5", 1);
  mtf_pjrt_runtime *rt = NULL;
  mtf_pjrt_options options = {.local_devices = 2, .threads = 40};
  CHECK(mtf_pjrt_open(&options, &rt, &err) == MTF_OK);
  if (rt) {
    CHECK(mtf_pjrt_threads(rt) == 5);
    CHECK(mtf_pjrt_threads_set(rt) == 0);
    CHECK(strcmp(getenv(MTF_PJRT_THREADS_ENV), "5") == 0);
    mtf_pjrt_close(rt);
  }
  unsetenv(MTF_PJRT_THREADS_ENV);
}

int main(int argc, char **argv) {
  const char *no_get_api = NULL, *old_api = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--no-get-api") == 0) no_get_api = argv[i + 1];
    if (strcmp(argv[i], "--old-api") == 0) old_api = argv[i + 1];
  }
  test_load_errors(no_get_api, old_api);
  test_all_reduce();
  test_thread_pool();
  return check_summary();
}

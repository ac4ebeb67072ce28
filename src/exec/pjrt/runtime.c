/* The PJRT runtime (see runtime.h): the PJRT C API behind mtf's error values and opaque handles. */
#define _POSIX_C_SOURCE 200809L
#include "exec/pjrt/runtime.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pjrt_c_api.h"

/* The oldest minor version accepted (with major PJRT_API_MAJOR): every function and argument field mtf uses
 * exists from there on; the API table's size is checked as well. 0.81 (xla-cpu-pjrt 0.0.1) is the one tested. */
#define MTF_PJRT_MIN_MINOR 60

#ifndef MTF_PJRT_DEFAULT_PLUGIN
#define MTF_PJRT_DEFAULT_PLUGIN ""
#endif

#define MAX_DEVICES 4096

struct mtf_pjrt_runtime {
  void *library;
  const PJRT_Api *api;
  PJRT_Client *client;
  char path[1024];
  char platform_name[64];
  char platform_version[256];
  int device_count;
  PJRT_Device **devices;
  int *device_ids;
  char (*device_kinds)[64];
  int threads;           /* the pool size: the user's or the one mtf set; 0 = unknown (the plugin's default) */
  int threads_from_user; /* $PJRT_NPROC / $NPROC was set before mtf_pjrt_open */
};

struct mtf_pjrt_executable {
  PJRT_LoadedExecutable *loaded;
  int num_outputs;
  int num_devices;
  int launches; /* runs so far: each run's launch_id */
};

/* mtf_pjrt_buffer is PJRT_Buffer itself: the handle is only ever cast back. */

const char *mtf_pjrt_default_plugin(void) { return MTF_PJRT_DEFAULT_PLUGIN; }

/* A PJRT_Error -> err ("what: plugin's message"), destroying the PJRT_Error; returns MTF_OK when there was
 * none. The PJRT error code is kept in the text: callers only need "failed, and why". */
static int take_error(const PJRT_Api *api, PJRT_Error *error, mtf_error *err, const char *what) {
  if (!error) return MTF_OK;
  PJRT_Error_Message_Args m = {.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE, .error = error};
  api->PJRT_Error_Message(&m);
  PJRT_Error_GetCode_Args c = {.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE, .error = error};
  int code = api->PJRT_Error_GetCode(&c) ? -1 : (int)c.code;
  mtf_error_set(err, MTF_ERR_INVALID, "PJRT %s failed (PJRT error code %d): %.*s", what, code,
                (int)(m.message_size > 800 ? 800 : m.message_size), m.message ? m.message : "");
  PJRT_Error_Destroy_Args d = {.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE, .error = error};
  api->PJRT_Error_Destroy(&d);
  return MTF_ERR_INVALID;
}

static int await_event(const PJRT_Api *api, PJRT_Event *event, mtf_error *err, const char *what) {
  if (!event) return MTF_OK;
  PJRT_Event_Await_Args a = {.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE, .event = event};
  int rc = take_error(api, api->PJRT_Event_Await(&a), err, what);
  PJRT_Event_Destroy_Args d = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = event};
  PJRT_Error *destroy_error = api->PJRT_Event_Destroy(&d);
  if (rc == MTF_OK) rc = take_error(api, destroy_error, err, what);
  else take_error(api, destroy_error, NULL, what);
  return rc;
}

static const char *hint_install(void) {
  return "install the CPU plugin with `bash tools/install-deps.sh --pjrt` (PyPI package " MTF_PJRT_CPU_PACKAGE
         "), or name a plugin .so (libtpu.so, a GPU plugin) with `backend.plugin: PATH` or " MTF_PJRT_PLUGIN_ENV;
}

int mtf_pjrt_resolve_plugin(const char *configured, char *out, size_t cap, mtf_error *err) {
  const char *path = configured && configured[0] ? configured : getenv(MTF_PJRT_PLUGIN_ENV);
  if (!path || !path[0]) path = MTF_PJRT_DEFAULT_PLUGIN;
  if (!path[0])
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.kind pjrt: no PJRT plugin named and none installed: %s",
                         hint_install());
  if (strlen(path) >= cap)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.plugin: path longer than %zu characters", cap - 1);
  memcpy(out, path, strlen(path) + 1);
  return MTF_OK;
}

/* dlopen + GetPjrtApi + version and table checks: each failure says which and what to do. */
static int load_plugin(mtf_pjrt_runtime *rt, mtf_error *err) {
  struct stat st;
  if (stat(rt->path, &st) != 0)
    return mtf_error_set(err, MTF_ERR_IO, "PJRT plugin '%s' not found: %s", rt->path, hint_install());
  if (!S_ISREG(st.st_mode))
    return mtf_error_set(err, MTF_ERR_IO, "PJRT plugin '%s' is not a regular file: %s", rt->path, hint_install());
  rt->library = dlopen(rt->path, RTLD_NOW | RTLD_LOCAL);
  if (!rt->library)
    return mtf_error_set(err, MTF_ERR_INVALID, "PJRT plugin '%s' could not be loaded as a shared object (%s): %s",
                         rt->path, dlerror(), hint_install());
  typedef const PJRT_Api *(*get_api_fn)(void);
  dlerror();
  void *symbol = dlsym(rt->library, "GetPjrtApi");
  if (!symbol)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "'%s' is not a PJRT plugin: it has no GetPjrtApi symbol (backend.plugin / " MTF_PJRT_PLUGIN_ENV
                         " must name a PJRT plugin such as xla_cpu_pjrt.so from " MTF_PJRT_CPU_PACKAGE " or libtpu.so)",
                         rt->path);
  get_api_fn get_api;
  memcpy(&get_api, &symbol, sizeof get_api); /* object pointer -> function pointer without a cast warning */
  rt->api = get_api();
  if (!rt->api) return mtf_error_set(err, MTF_ERR_INVALID, "PJRT plugin '%s': GetPjrtApi returned NULL", rt->path);
  int major = rt->api->pjrt_api_version.major_version, minor = rt->api->pjrt_api_version.minor_version;
  /* The table must reach the last function mtf calls (an older plugin's table is shorter). */
  size_t needed = offsetof(PJRT_Api, PJRT_Executable_OutputDimensions) + sizeof(void *);
  if (major != PJRT_API_MAJOR || minor < MTF_PJRT_MIN_MINOR || rt->api->struct_size < needed)
    return mtf_error_set(err, MTF_ERR_INVALID,
                         "PJRT plugin '%s' has API version %d.%d; mtf was built for %d.%d and needs %d.%d or newer "
                         "(same major): use a newer plugin (pip install -U %s, a newer libtpu) or rebuild mtf "
                         "against its pjrt_c_api.h",
                         rt->path, major, minor, PJRT_API_MAJOR, PJRT_API_MINOR, PJRT_API_MAJOR, MTF_PJRT_MIN_MINOR,
                         MTF_PJRT_CPU_PACKAGE);
  PJRT_Plugin_Initialize_Args init = {.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE};
  return take_error(rt->api, rt->api->PJRT_Plugin_Initialize(&init), err, "plugin initialisation");
}

static void copy_text(char *dst, size_t cap, const char *src, size_t length) {
  if (length >= cap) length = cap - 1;
  memcpy(dst, src ? src : "", src ? length : 0);
  dst[src ? length : 0] = 0;
}

static int read_devices(mtf_pjrt_runtime *rt, mtf_error *err) {
  const PJRT_Api *api = rt->api;
  PJRT_Client_PlatformName_Args pn = {.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE, .client = rt->client};
  MTF_CHECK(take_error(api, api->PJRT_Client_PlatformName(&pn), err, "platform name"));
  copy_text(rt->platform_name, sizeof rt->platform_name, pn.platform_name, pn.platform_name_size);
  PJRT_Client_PlatformVersion_Args pv = {.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE,
                                         .client = rt->client};
  MTF_CHECK(take_error(api, api->PJRT_Client_PlatformVersion(&pv), err, "platform version"));
  copy_text(rt->platform_version, sizeof rt->platform_version, pv.platform_version, pv.platform_version_size);
  PJRT_Client_AddressableDevices_Args ad = {.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE,
                                            .client = rt->client};
  MTF_CHECK(take_error(api, api->PJRT_Client_AddressableDevices(&ad), err, "addressable devices"));
  if (ad.num_addressable_devices == 0 || ad.num_addressable_devices > MAX_DEVICES)
    return mtf_error_set(err, MTF_ERR_INVALID, "PJRT plugin '%s' reports %zu addressable devices", rt->path,
                         ad.num_addressable_devices);
  int n = (int)ad.num_addressable_devices;
  rt->devices = calloc((size_t)n, sizeof *rt->devices);
  rt->device_ids = calloc((size_t)n, sizeof *rt->device_ids);
  rt->device_kinds = calloc((size_t)n, sizeof *rt->device_kinds);
  if (!rt->devices || !rt->device_ids || !rt->device_kinds) return mtf_error_set(err, MTF_ERR_NOMEM, "PJRT devices");
  rt->device_count = n;
  for (int i = 0; i < n; i++) {
    rt->devices[i] = ad.addressable_devices[i];
    PJRT_Device_GetDescription_Args gd = {.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE,
                                          .device = rt->devices[i]};
    MTF_CHECK(take_error(api, api->PJRT_Device_GetDescription(&gd), err, "device description"));
    PJRT_DeviceDescription_Id_Args id = {.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE,
                                         .device_description = gd.device_description};
    MTF_CHECK(take_error(api, api->PJRT_DeviceDescription_Id(&id), err, "device id"));
    rt->device_ids[i] = id.id;
    PJRT_DeviceDescription_Kind_Args kind = {.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE,
                                             .device_description = gd.device_description};
    MTF_CHECK(take_error(api, api->PJRT_DeviceDescription_Kind(&kind), err, "device kind"));
    copy_text(rt->device_kinds[i], sizeof rt->device_kinds[i], kind.device_kind, kind.device_kind_size);
  }
  return MTF_OK;
}

int mtf_pjrt_threads_needed(int n_devices, int n_collectives, int cores) {
  if (cores < 1) cores = 1;
  if (n_devices <= 1 || n_collectives <= 0) return cores;
  long need = (long)cores + (long)n_collectives * (n_devices - 1);
  return need > 100000 ? 100000 : (int)need;
}

int mtf_pjrt_threads(const mtf_pjrt_runtime *rt) { return rt->threads; }
int mtf_pjrt_threads_set(const mtf_pjrt_runtime *rt) { return rt->threads_from_user ? 0 : rt->threads; }

/* Sets $PJRT_NPROC to `threads` for the client's creation unless the user set it (or NPROC): the plugin reads
 * it only then. Returns whether it was set here, so that create_client can take it away again (a later
 * client, and the processes mtf starts, see the environment as the user left it). */
static int set_thread_env(mtf_pjrt_runtime *rt, int threads) {
  const char *user = getenv(MTF_PJRT_THREADS_ENV);
  if (!user || !user[0]) user = getenv("NPROC");
  if (user && user[0]) {
    rt->threads = atoi(user);
    rt->threads_from_user = 1;
    return 0;
  }
  if (threads <= 0) return 0;
  char text[32];
  snprintf(text, sizeof text, "%d", threads);
  if (setenv(MTF_PJRT_THREADS_ENV, text, 1) != 0) return 0;
  rt->threads = threads;
  return 1;
}

int mtf_pjrt_open(const mtf_pjrt_options *options, mtf_pjrt_runtime **out, mtf_error *err) {
  *out = NULL;
  if (options->local_devices < 0)
    return mtf_error_set(err, MTF_ERR_INVALID, "backend.local_devices: %d is negative (0 = the plugin's default)",
                         options->local_devices);
  mtf_pjrt_runtime *rt = calloc(1, sizeof *rt);
  if (!rt) return mtf_error_set(err, MTF_ERR_NOMEM, "PJRT runtime");
  int rc = mtf_pjrt_resolve_plugin(options->plugin_path, rt->path, sizeof rt->path, err);
  if (rc == MTF_OK) rc = load_plugin(rt, err);
  if (rc == MTF_OK) {
    /* "cpu_device_count" is the XLA CPU plugin's option; other plugins ignore unknown options' absence, so
     * it is only passed when a count was asked for. */
    PJRT_NamedValue count = {.struct_size = PJRT_NamedValue_STRUCT_SIZE,
                             .name = "cpu_device_count",
                             .name_size = strlen("cpu_device_count"),
                             .type = PJRT_NamedValue_kInt64,
                             .int64_value = options->local_devices,
                             .value_size = 1};
    PJRT_Client_Create_Args cc = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE,
                                  .create_options = options->local_devices > 0 ? &count : NULL,
                                  .num_options = options->local_devices > 0 ? 1 : 0};
    int env_set = set_thread_env(rt, options->threads);
    rc = take_error(rt->api, rt->api->PJRT_Client_Create(&cc), err, "client creation");
    if (env_set) unsetenv(MTF_PJRT_THREADS_ENV);
    rt->client = cc.client;
  }
  if (rc == MTF_OK) rc = read_devices(rt, err);
  if (rc == MTF_OK && options->local_devices > 0 && rt->device_count < options->local_devices)
    rc = mtf_error_set(err, MTF_ERR_MESH,
                       "backend.local_devices is %d but PJRT plugin '%s' (%s) has %d addressable devices",
                       options->local_devices, rt->path, rt->platform_name, rt->device_count);
  if (rc != MTF_OK) {
    mtf_pjrt_close(rt);
    return rc;
  }
  /* Asked for fewer than a TPU host has: use the first local_devices of them. */
  if (options->local_devices > 0) rt->device_count = options->local_devices;
  *out = rt;
  return MTF_OK;
}

void mtf_pjrt_close(mtf_pjrt_runtime *rt) {
  if (!rt) return;
  if (rt->client) {
    PJRT_Client_Destroy_Args d = {.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE, .client = rt->client};
    take_error(rt->api, rt->api->PJRT_Client_Destroy(&d), NULL, "client destruction");
  }
  /* The plugin stays loaded: XLA's plugins register process-wide state (flags, thread pools) that does not
   * survive dlclose, and a second open in the same process must find it intact. */
  free(rt->devices);
  free(rt->device_ids);
  free(rt->device_kinds);
  free(rt);
}

const char *mtf_pjrt_platform_name(const mtf_pjrt_runtime *rt) { return rt->platform_name; }
const char *mtf_pjrt_platform_version(const mtf_pjrt_runtime *rt) { return rt->platform_version; }
const char *mtf_pjrt_plugin_path(const mtf_pjrt_runtime *rt) { return rt->path; }
void mtf_pjrt_api_version(const mtf_pjrt_runtime *rt, int *major, int *minor) {
  *major = rt->api->pjrt_api_version.major_version;
  *minor = rt->api->pjrt_api_version.minor_version;
}
int mtf_pjrt_device_count(const mtf_pjrt_runtime *rt) { return rt->device_count; }
int mtf_pjrt_device_id(const mtf_pjrt_runtime *rt, int device) { return rt->device_ids[device]; }
const char *mtf_pjrt_device_kind(const mtf_pjrt_runtime *rt, int device) { return rt->device_kinds[device]; }

void mtf_pjrt_describe(const mtf_pjrt_runtime *rt, char *out, size_t cap) {
  int major, minor;
  mtf_pjrt_api_version(rt, &major, &minor);
  size_t used = (size_t)snprintf(out, cap,
                                 "pjrt plugin: %s\npjrt platform: %s, version %s, PJRT C API %d.%d\npjrt devices: %d",
                                 rt->path, rt->platform_name, rt->platform_version, major, minor, rt->device_count);
  for (int i = 0; i < rt->device_count && used < cap; i++)
    used += (size_t)snprintf(out + used, cap - used, "%s id %d (%s)", i ? "," : " -", rt->device_ids[i],
                             rt->device_kinds[i]);
  if (rt->threads > 0 && used < cap)
    snprintf(out + used, cap - used, "\npjrt threads: %d (%s=%d%s)", rt->threads, MTF_PJRT_THREADS_ENV, rt->threads,
             rt->threads_from_user ? ", as set in the environment" : ", set by mtf for the program's collectives");
}

size_t mtf_pjrt_type_size(mtf_pjrt_type type) { return type == MTF_PJRT_U64 ? 8 : 4; }

static PJRT_Buffer_Type pjrt_type(mtf_pjrt_type type) {
  return type == MTF_PJRT_S32 ? PJRT_Buffer_Type_S32
         : type == MTF_PJRT_U64 ? PJRT_Buffer_Type_U64
                                       : PJRT_Buffer_Type_F32;
}

static int check_device(const mtf_pjrt_runtime *rt, int device, mtf_error *err) {
  if (device < 0 || device >= rt->device_count)
    return mtf_error_set(err, MTF_ERR_INVALID, "PJRT device %d out of range (%d devices)", device, rt->device_count);
  return MTF_OK;
}

int mtf_pjrt_buffer_from_host(mtf_pjrt_runtime *rt, int device, mtf_pjrt_type type, const int64_t *dims, int rank,
                              const void *data, mtf_pjrt_buffer **out, mtf_error *err) {
  *out = NULL;
  MTF_CHECK(check_device(rt, device, err));
  if (rank < 0 || (rank > 0 && !dims)) return mtf_error_set(err, MTF_ERR_INVALID, "PJRT buffer: bad rank %d", rank);
  PJRT_Client_BufferFromHostBuffer_Args a = {
      .struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
      .client = rt->client,
      .data = data,
      .type = pjrt_type(type),
      .dims = dims,
      .num_dims = (size_t)rank,
      .host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
      .device = rt->devices[device],
  };
  MTF_CHECK(take_error(rt->api, rt->api->PJRT_Client_BufferFromHostBuffer(&a), err, "upload to device"));
  int rc = await_event(rt->api, a.done_with_host_buffer, err, "upload to device");
  if (rc != MTF_OK) {
    mtf_pjrt_buffer_destroy(rt, (mtf_pjrt_buffer *)a.buffer);
    return rc;
  }
  *out = (mtf_pjrt_buffer *)a.buffer;
  return MTF_OK;
}

size_t mtf_pjrt_buffer_host_bytes(mtf_pjrt_runtime *rt, mtf_pjrt_buffer *buffer, mtf_error *err) {
  PJRT_Buffer_ToHostBuffer_Args a = {.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE,
                                     .src = (PJRT_Buffer *)buffer};
  if (take_error(rt->api, rt->api->PJRT_Buffer_ToHostBuffer(&a), err, "buffer size query") != MTF_OK) return 0;
  return a.dst_size;
}

int mtf_pjrt_buffer_to_host(mtf_pjrt_runtime *rt, mtf_pjrt_buffer *buffer, void *dst, size_t bytes, mtf_error *err) {
  size_t size = mtf_pjrt_buffer_host_bytes(rt, buffer, err);
  if (size == 0 && bytes != 0) return err ? (err->code ? err->code : MTF_ERR_INVALID) : MTF_ERR_INVALID;
  if (size != bytes)
    return mtf_error_set(err, MTF_ERR_INVALID, "PJRT download: buffer holds %zu bytes, %zu asked for", size, bytes);
  if (bytes == 0) return MTF_OK;
  PJRT_Buffer_ToHostBuffer_Args a = {.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE,
                                     .src = (PJRT_Buffer *)buffer,
                                     .dst = dst,
                                     .dst_size = bytes};
  MTF_CHECK(take_error(rt->api, rt->api->PJRT_Buffer_ToHostBuffer(&a), err, "download to host"));
  return await_event(rt->api, a.event, err, "download to host");
}

void mtf_pjrt_buffer_destroy(mtf_pjrt_runtime *rt, mtf_pjrt_buffer *buffer) {
  if (!buffer) return;
  PJRT_Buffer_Destroy_Args d = {.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE, .buffer = (PJRT_Buffer *)buffer};
  take_error(rt->api, rt->api->PJRT_Buffer_Destroy(&d), NULL, "buffer destruction");
}

/* A varint field of a protobuf message (wire type 0). */
static size_t put_varint_field(unsigned char *p, int field, uint64_t value) {
  size_t n = 0;
  p[n++] = (unsigned char)(field << 3);
  do {
    unsigned char byte = value & 0x7f;
    value >>= 7;
    p[n++] = byte | (value ? 0x80 : 0);
  } while (value);
  return n;
}

/* xla.CompileOptionsProto { executable_build_options (3): ExecutableBuildOptionsProto { num_replicas (4),
 * num_partitions (5), use_spmd_partitioning (6) = false } }: the only options mtf sets, encoded by hand so
 * that mtf needs no protobuf library. */
static size_t compile_options(unsigned char *out, int num_replicas, int num_partitions) {
  unsigned char inner[32];
  size_t n = 0;
  n += put_varint_field(inner + n, 4, (uint64_t)num_replicas);
  n += put_varint_field(inner + n, 5, (uint64_t)num_partitions);
  n += put_varint_field(inner + n, 6, 0);
  out[0] = (unsigned char)((3 << 3) | 2); /* field 3, length-delimited */
  out[1] = (unsigned char)n;
  memcpy(out + 2, inner, n);
  return n + 2;
}

int mtf_pjrt_compile(mtf_pjrt_runtime *rt, const char *mlir_text, size_t length, int num_replicas,
                     int num_partitions, mtf_pjrt_executable **out, mtf_error *err) {
  *out = NULL;
  if (num_replicas < 1 || num_partitions < 1 || (long)num_replicas * num_partitions > rt->device_count)
    return mtf_error_set(err, MTF_ERR_MESH,
                         "a program for %d replicas x %d partitions needs that many PJRT devices; %s has %d (set "
                         "backend.local_devices, or use a smaller mesh)",
                         num_replicas, num_partitions, rt->platform_name, rt->device_count);
  unsigned char options[64];
  size_t options_size = compile_options(options, num_replicas, num_partitions);
  PJRT_Program program = {.struct_size = PJRT_Program_STRUCT_SIZE,
                          .code = (char *)mlir_text, /* the API's field is not const; Compile only reads it */
                          .code_size = length,
                          .format = "mlir",
                          .format_size = 4};
  PJRT_Client_Compile_Args c = {.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE,
                                .client = rt->client,
                                .program = &program,
                                .compile_options = (const char *)options,
                                .compile_options_size = options_size};
  MTF_CHECK(take_error(rt->api, rt->api->PJRT_Client_Compile(&c), err, "compilation of the StableHLO module"));
  mtf_pjrt_executable *exe = calloc(1, sizeof *exe);
  if (!exe) {
    PJRT_LoadedExecutable_Destroy_Args d = {.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
                                            .executable = c.executable};
    take_error(rt->api, rt->api->PJRT_LoadedExecutable_Destroy(&d), NULL, "executable destruction");
    return mtf_error_set(err, MTF_ERR_NOMEM, "PJRT executable");
  }
  exe->loaded = c.executable;
  int rc = MTF_OK;
  PJRT_LoadedExecutable_GetExecutable_Args ge = {.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
                                                 .loaded_executable = c.executable};
  rc = take_error(rt->api, rt->api->PJRT_LoadedExecutable_GetExecutable(&ge), err, "executable query");
  if (rc == MTF_OK) {
    PJRT_Executable_NumOutputs_Args no = {.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE,
                                          .executable = ge.executable};
    rc = take_error(rt->api, rt->api->PJRT_Executable_NumOutputs(&no), err, "output count");
    exe->num_outputs = (int)no.num_outputs;
    PJRT_Executable_Destroy_Args ed = {.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE,
                                       .executable = ge.executable};
    take_error(rt->api, rt->api->PJRT_Executable_Destroy(&ed), NULL, "executable query");
  }
  if (rc == MTF_OK) {
    PJRT_LoadedExecutable_AddressableDevices_Args ad = {
        .struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE, .executable = c.executable};
    rc = take_error(rt->api, rt->api->PJRT_LoadedExecutable_AddressableDevices(&ad), err, "executable devices");
    exe->num_devices = (int)ad.num_addressable_devices;
  }
  if (rc != MTF_OK) {
    mtf_pjrt_executable_destroy(rt, exe);
    return rc;
  }
  *out = exe;
  return MTF_OK;
}

int mtf_pjrt_executable_num_outputs(const mtf_pjrt_executable *exe) { return exe->num_outputs; }
int mtf_pjrt_executable_num_devices(const mtf_pjrt_executable *exe) { return exe->num_devices; }

void mtf_pjrt_executable_destroy(mtf_pjrt_runtime *rt, mtf_pjrt_executable *exe) {
  if (!exe) return;
  if (exe->loaded) {
    PJRT_LoadedExecutable_Destroy_Args d = {.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
                                            .executable = exe->loaded};
    take_error(rt->api, rt->api->PJRT_LoadedExecutable_Destroy(&d), NULL, "executable destruction");
  }
  free(exe);
}

int mtf_pjrt_execute(mtf_pjrt_runtime *rt, mtf_pjrt_executable *exe, int num_args, mtf_pjrt_buffer *const *args,
                     const unsigned char *keep, mtf_pjrt_buffer **outputs, mtf_error *err) {
  int devices = exe->num_devices, outs = exe->num_outputs;
  PJRT_Buffer *const **arg_lists = calloc((size_t)devices, sizeof *arg_lists);
  PJRT_Buffer ***out_lists = calloc((size_t)devices, sizeof *out_lists);
  PJRT_Event **events = calloc((size_t)devices, sizeof *events);
  int64_t *kept = calloc((size_t)(num_args > 0 ? num_args : 1), sizeof *kept);
  int rc = MTF_OK;
  for (int i = 0; i < devices * outs; i++) outputs[i] = NULL;
  if (!arg_lists || !out_lists || !events || !kept) rc = mtf_error_set(err, MTF_ERR_NOMEM, "PJRT execute");
  size_t num_kept = 0;
  for (int a = 0; rc == MTF_OK && keep && a < num_args; a++)
    if (keep[a]) kept[num_kept++] = a;
  for (int d = 0; rc == MTF_OK && d < devices; d++) {
    arg_lists[d] = (PJRT_Buffer *const *)(args + (size_t)d * (size_t)num_args);
    out_lists[d] = (PJRT_Buffer **)(outputs + (size_t)d * (size_t)outs);
  }
  if (rc == MTF_OK) {
    /* A fresh launch id per run (the XLA CPU client keys its collectives' rendezvous by it, "run_id"), so
     * that no two runs of one executable share a rendezvous key. */
    exe->launches = exe->launches % 2000000000 + 1;
    PJRT_ExecuteOptions options = {.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE,
                                   .launch_id = exe->launches,
                                   .non_donatable_input_indices = kept,
                                   .num_non_donatable_input_indices = num_kept};
    PJRT_LoadedExecutable_Execute_Args e = {.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
                                            .executable = exe->loaded,
                                            .options = &options,
                                            .argument_lists = arg_lists,
                                            .num_devices = (size_t)devices,
                                            .num_args = (size_t)num_args,
                                            .output_lists = out_lists,
                                            .device_complete_events = events};
    rc = take_error(rt->api, rt->api->PJRT_LoadedExecutable_Execute(&e), err, "execution");
    /* Every device's event is awaited and destroyed, also after the first failure. */
    for (int d = 0; rc == MTF_OK && d < devices; d++) {
      rc = await_event(rt->api, events[d], err, "execution");
      events[d] = NULL;
    }
    for (int d = 0; d < devices; d++)
      if (events[d]) await_event(rt->api, events[d], NULL, "execution");
  }
  if (rc != MTF_OK)
    for (int i = 0; i < devices * outs; i++) {
      mtf_pjrt_buffer_destroy(rt, outputs[i]);
      outputs[i] = NULL;
    }
  free(arg_lists);
  free(out_lists);
  free(events);
  free(kept);
  return rc;
}

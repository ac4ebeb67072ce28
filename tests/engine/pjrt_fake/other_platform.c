/* A PJRT plugin of another platform than the XLA CPU plugin ("faketpu", 2 devices) that can only open a
 * client and describe its devices: enough for the start of a run, which must refuse several processes with
 * the message for plugins that can form multi-process clients (libtpu, the CUDA plugin), not the CPU
 * plugin's. Nothing can be compiled or run on it (those table entries stay NULL and are never reached). */
#include <string.h>

#include "pjrt_c_api.h"

const PJRT_Api *GetPjrtApi(void);

enum { FAKE_DEVICES = 2 };

struct PJRT_Client {
  int unused;
};
struct PJRT_DeviceDescription {
  int id;
};
struct PJRT_Device {
  PJRT_DeviceDescription description;
};

static PJRT_Client the_client;
static PJRT_Device devices[FAKE_DEVICES] = {{{0}}, {{1}}};
static PJRT_Device *device_list[FAKE_DEVICES] = {&devices[0], &devices[1]};

static PJRT_Error *initialize(PJRT_Plugin_Initialize_Args *args) {
  (void)args;
  return NULL;
}

static PJRT_Error *client_create(PJRT_Client_Create_Args *args) {
  args->client = &the_client;
  return NULL;
}

static PJRT_Error *client_destroy(PJRT_Client_Destroy_Args *args) {
  (void)args;
  return NULL;
}

static PJRT_Error *platform_name(PJRT_Client_PlatformName_Args *args) {
  args->platform_name = "faketpu";
  args->platform_name_size = strlen(args->platform_name);
  return NULL;
}

static PJRT_Error *platform_version(PJRT_Client_PlatformVersion_Args *args) {
  args->platform_version = "fake 0";
  args->platform_version_size = strlen(args->platform_version);
  return NULL;
}

static PJRT_Error *addressable_devices(PJRT_Client_AddressableDevices_Args *args) {
  args->addressable_devices = device_list;
  args->num_addressable_devices = FAKE_DEVICES;
  return NULL;
}

static PJRT_Error *device_description(PJRT_Device_GetDescription_Args *args) {
  args->device_description = &args->device->description;
  return NULL;
}

static PJRT_Error *description_id(PJRT_DeviceDescription_Id_Args *args) {
  args->id = args->device_description->id;
  return NULL;
}

static PJRT_Error *description_kind(PJRT_DeviceDescription_Kind_Args *args) {
  args->device_kind = "faketpu";
  args->device_kind_size = strlen(args->device_kind);
  return NULL;
}

static PJRT_Api api = {
    .struct_size = PJRT_Api_STRUCT_SIZE,
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE,
                         .major_version = PJRT_API_MAJOR,
                         .minor_version = PJRT_API_MINOR},
    .PJRT_Plugin_Initialize = initialize,
    .PJRT_Client_Create = client_create,
    .PJRT_Client_Destroy = client_destroy,
    .PJRT_Client_PlatformName = platform_name,
    .PJRT_Client_PlatformVersion = platform_version,
    .PJRT_Client_AddressableDevices = addressable_devices,
    .PJRT_Device_GetDescription = device_description,
    .PJRT_DeviceDescription_Id = description_id,
    .PJRT_DeviceDescription_Kind = description_kind,
};

const PJRT_Api *GetPjrtApi(void) { return &api; }

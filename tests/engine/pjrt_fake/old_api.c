/* A PJRT plugin far older than mtf supports: GetPjrtApi reports API 0.1 and a table too short for mtf's
 * calls. The runtime must refuse it before calling anything in the table (all of whose entries are NULL). */
#include "pjrt_c_api.h"

const PJRT_Api *GetPjrtApi(void);

static PJRT_Api old_api = {
    .struct_size = offsetof(PJRT_Api, PJRT_Client_Create),
    .pjrt_api_version = {.struct_size = PJRT_Api_Version_STRUCT_SIZE, .major_version = 0, .minor_version = 1},
};

const PJRT_Api *GetPjrtApi(void) { return &old_api; }

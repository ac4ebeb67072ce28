#include "comm/agree.h"

#include <stdint.h>
#include <string.h>

int mtf_comm_agree(mtf_comm *comm, int rc, mtf_error *err) {
  if (!comm || comm->size == 1) return rc;
  mtf_axis_set all = mtf_mesh_all_axes(&comm->mesh);
  mtf_error comm_err;
  int32_t failing = rc != MTF_OK ? comm->rank : comm->size;
  if (mtf_comm_allreduce(comm, all, &failing, &failing, 1, MTF_I32, MTF_REDUCE_MIN, &comm_err) != MTF_OK) {
    if (err) *err = comm_err;
    return comm_err.code;
  }
  if (failing == comm->size) return MTF_OK;

  /* The code and message travel as one int32 buffer (the collectives move typed elements). */
  int32_t packet[1 + MTF_ERROR_MSG_MAX / 4];
  memset(packet, 0, sizeof packet);
  if (comm->rank == failing && err) {
    packet[0] = err->code ? err->code : rc;
    memcpy(&packet[1], err->msg, MTF_ERROR_MSG_MAX);
  } else if (comm->rank == failing) {
    packet[0] = rc;
  }
  if (mtf_comm_broadcast(comm, all, packet, sizeof packet / sizeof packet[0], MTF_I32, failing, &comm_err) !=
      MTF_OK) {
    if (err) *err = comm_err;
    return comm_err.code;
  }
  if (!err) return packet[0];
  err->code = packet[0];
  memcpy(err->msg, &packet[1], MTF_ERROR_MSG_MAX);
  err->msg[MTF_ERROR_MSG_MAX - 1] = '\0';
  return mtf_error_prefix(err, "rank %d", failing);
}

/* Making every rank fail together. A rank that hits bad input alone must not leave the others waiting in
 * the next collective: at each agreement point every rank calls mtf_comm_agree with its own status; all of
 * them return the same code and message (the lowest failing rank's, prefixed with its rank). */
#ifndef MTF_COMM_AGREE_H
#define MTF_COMM_AGREE_H

#include "comm/comm.h"
#include "core/error.h"

/* Collective over all of comm's ranks (comm may be NULL: then it returns rc). err holds this rank's
 * message when rc != MTF_OK and receives the shared one. */
int mtf_comm_agree(mtf_comm *comm, int rc, mtf_error *err);

#endif

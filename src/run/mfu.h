/* The ceiling for model FLOPs utilisation: a measured sgemm rate per rank, summed over the job. */
#ifndef MTF_RUN_MFU_H
#define MTF_RUN_MFU_H

/* FLOP/s of cblas_sgemm on a 512^3 product with this rank's BLAS threads (best of 4). Local. */
double mtf_mfu_measure_peak(void);
/* Collective: the measured peaks of every rank, summed. */
double mtf_mfu_job_peak(void);
/* Model FLOPs per second over the job's peak (0 when the peak is unknown). */
double mtf_mfu(double flops_per_token, double tokens_per_second, double job_peak);

#endif

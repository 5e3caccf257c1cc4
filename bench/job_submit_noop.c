/*
 * job_submit_noop.c: a job_submit plugin that does nothing, named like gputokens' so that
 * bench/admission.sh can load it in its place: what any plugin costs slurmctld, and how far the
 * benchmark's noise reaches on the machine. Not part of the product.
 *
 *   cc -O2 -shared -fPIC -o /tmp/job_submit_noop.so bench/job_submit_noop.c
 *   JOBSUBMIT_PLUGIN_SO=/tmp/job_submit_noop.so bash bench/admission.sh
 */
#include <stdint.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

const char plugin_name[] = "job_submit that does nothing (gputokens benchmark baseline)";
const char plugin_type[] = "job_submit/gputokens";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg)
{
	return SLURM_SUCCESS;
}

/* 22.05's three arguments; later releases pass a fourth, which this ignores. */
int job_modify(job_desc_msg_t *job_desc, void *job_ptr, uint32_t submit_uid)
{
	return SLURM_SUCCESS;
}

/*
 * claim.h: the plain name of an OUT_SHARED output (output.h), taken by one process of a job
 * (claim.c): the job's stamp on the temporary file, the directory's lock, the name checked.
 */
#ifndef SHIMGEN_CLAIM_H
#define SHIMGEN_CLAIM_H

struct timespec;
int shimgen_claim_stamp(int fd, struct timespec *stored);
int shimgen_claim_lock(int dirfd);
int shimgen_claim_taken(int dirfd, const char *base, const struct timespec *stored);

#endif

/*
 * Lab 1: open a device and register memory (labs/1-open-and-register/README.md).
 *   cc -o lab1 lab.c -libverbs && softverbs labs check 1 ./lab1
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN 4096

/* The names of the access flags set in `access`, joined by '|'. */
static void print_access(int access)
{
	const char *sep = "";
	printf(" access=");
	if (access & IBV_ACCESS_LOCAL_WRITE) { printf("%sLOCAL_WRITE", sep); sep = "|"; }
	if (access & IBV_ACCESS_REMOTE_WRITE) { printf("%sREMOTE_WRITE", sep); sep = "|"; }
	if (access & IBV_ACCESS_REMOTE_READ) { printf("%sREMOTE_READ", sep); sep = "|"; }
	if (access & IBV_ACCESS_REMOTE_ATOMIC) { printf("%sREMOTE_ATOMIC", sep); sep = "|"; }
	printf("\n");
}

int main(void)
{
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	int access = 0;
	char *buf = aligned_alloc(4096, LEN);
	/* TODO(1): list the devices (ibv_get_device_list), open the one named softverbs0
	 * (ibv_get_device_name, ibv_open_device), free the list, and print "device softverbs0". */
	if (!ctx) {
		/* A program run directly, not under `softverbs run`, finds no softverbs device. */
		fprintf(stderr, "no device opened: run the lab on softverbs, `softverbs run -- "
				"./lab1` or `softverbs labs check 1 ./lab1`\n");
		return 1;
	}
	/* TODO(2): allocate a protection domain (ibv_alloc_pd). */
	/* TODO(3): register all LEN bytes of buf so that this side may write them and a peer may
	 * write and read them: set `access`, then ibv_reg_mr. */
	if (!pd || !mr) {
		fprintf(stderr, "no PD or MR\n");
		return 1;
	}
	printf("mr length=%zu", mr->length);
	print_access(access);
	printf("keys lkey=0x%x rkey=0x%x\n", mr->lkey, mr->rkey);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return 0;
}

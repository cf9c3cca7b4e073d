/*
 * odp.c - on-demand paging from C (issue 30), as rxe (Linux 6.15+) has it: odp_caps in
 * ibv_query_device_ex, ibv_reg_mr with IBV_ACCESS_ON_DEMAND over pages that are not pinned,
 * RDMA WRITE, READ and FETCH_AND_ADD between two such MRs, ibv_advise_mr, and a WRITE into a
 * page the program unmapped after registration, which fails the WR (REM_ACCESS_ERR) and not
 * the process. Each check prints one line; tests/odp.rs compares them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

static struct ibv_cq *cq;

static void run(struct ibv_qp *qp, const char *name, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc = ibv_post_send(qp, wr, &bad);
	struct ibv_wc wc = { 0 };
	int n = 0;
	for (long spins = 0; rc == 0 && n == 0 && spins < 200000000; spins++)
		n = ibv_poll_cq(cq, 1, &wc);
	printf("%s: post=%d n=%d wr_id=%llu status=%s opcode=%d qp=%s\n", name, rc, n,
	       (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
	       wc.qp_num == qp->qp_num ? "ok" : "other");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof(dx));
	int q = ibv_query_device_ex(ctx, NULL, &dx);
	printf("query_device_ex: %d general=%#llx rc=%#x uc=%#x ud=%#x\n", q,
	       (unsigned long long)dx.odp_caps.general_caps, dx.odp_caps.per_transport_caps.rc_odp_caps,
	       dx.odp_caps.per_transport_caps.uc_odp_caps, dx.odp_caps.per_transport_caps.ud_odp_caps);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	long page = sysconf(_SC_PAGESIZE);
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	char *src = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *dst = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 2 * page, all | IBV_ACCESS_ON_DEMAND);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 2 * page, all | IBV_ACCESS_ON_DEMAND);
	printf("reg_mr on demand: %s addr=%s\n", smr && dmr ? "registered" : "refused",
	       dmr && dmr->addr == dst ? "the program's" : "moved");

	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qi), *b = ibv_create_qp(pd, &qi);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, all & ~IBV_ACCESS_LOCAL_WRITE);
	connect_rc(b, a->qp_num, gid, all & ~IBV_ACCESS_LOCAL_WRITE);

	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = 200, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	for (int i = 0; i < 200; i++)
		src[i] = (char)(i * 3);
	wr.wr.rdma.remote_addr = (uintptr_t)dst + page - 100; /* across dst's two pages */
	wr.wr.rdma.rkey = dmr->rkey;
	run(a, "write", &wr);
	printf("write landed: %s\n", memcmp(dst + page - 100, src, 200) ? "no" : "yes");

	strcpy(dst + 3000, "read back through the NIC");
	wr.wr_id = 2;
	wr.opcode = IBV_WR_RDMA_READ;
	sge.addr = (uintptr_t)src + page + 10;
	sge.length = 26;
	wr.wr.rdma.remote_addr = (uintptr_t)dst + 3000;
	run(a, "read", &wr);
	printf("read landed: %s\n", src + page + 10);

	*(unsigned long long *)(dst + 512) = 40;
	wr.wr_id = 3;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	sge.addr = (uintptr_t)src + 64;
	sge.length = 8;
	wr.wr.atomic.remote_addr = (uintptr_t)dst + 512;
	wr.wr.atomic.rkey = dmr->rkey;
	wr.wr.atomic.compare_add = 2;
	run(a, "fetch_add", &wr);
	printf("fetch_add: original=%llu now=%llu\n", *(unsigned long long *)(src + 64),
	       *(unsigned long long *)(dst + 512));

	struct ibv_sge whole = { .addr = (uintptr_t)dst, .length = 2 * page, .lkey = dmr->lkey };
	printf("advise_mr prefetch_write flush: %d\n",
	       ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &whole, 1));
	printf("advise_mr prefetch async: %d\n",
	       ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &whole, 1));
	printf("advise_mr advice 7: %s\n",
	       ibv_advise_mr(pd, 7, 0, &whole, 1) == EOPNOTSUPP ? "EOPNOTSUPP" : "other");

	/* The program unmaps dst's second page: a WRITE there is NAKed, the process lives. */
	munmap(dst + page, page);
	printf("advise_mr over the hole: %s\n",
	       ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &whole,
			     1) == EFAULT ? "EFAULT" : "other");
	wr.wr_id = 4;
	wr.opcode = IBV_WR_RDMA_WRITE;
	sge.addr = (uintptr_t)src;
	sge.length = 16;
	wr.wr.rdma.remote_addr = (uintptr_t)dst + page + 8;
	wr.wr.rdma.rkey = dmr->rkey;
	run(a, "write to the hole", &wr);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	printf("dereg: %d %d\n", ibv_dereg_mr(smr), ibv_dereg_mr(dmr));
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("still running\n");
	return 0;
}

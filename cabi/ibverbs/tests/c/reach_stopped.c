/*
 * reach_stopped.c - a C program's registered memory is reached as a Rust program's owned MRs
 * are (issue 29, Deliver 3). Two processes: the child (the target) registers a malloc'd
 * buffer that shares its pages with other heap objects on softverbs1 and connects an RC QP
 * to the parent's on softverbs0; the parent stops the child (SIGSTOP: its NIC thread
 * answers no packet) and WRITEs, then READs, its buffer. Reached, both complete while the
 * target is stopped, as no packet needs an answer; as packets (reach off) they complete only
 * once it runs again (SIGCONT). Either way the bytes and completions are the same.
 * tests/reach_stopped.rs runs it with direct reach on and off.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

struct side {
	uint32_t qpn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Polls `cq` for one completion for up to `secs`: 1 and *wc, or 0. */
static int poll_for(struct ibv_cq *cq, struct ibv_wc *wc, double secs)
{
	double end = now() + secs;
	while (now() < end)
		if (ibv_poll_cq(cq, 1, wc) == 1)
			return 1;
	return 0;
}

static void fill(char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 13 + seed);
}

static int xfer(int fd, void *p, size_t n, int out)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = out ? write(fd, (char *)p + done, n - done) : read(fd, (char *)p + done, n - done);
		if (r <= 0)
			return -1;
		done += r;
	}
	return 0;
}

enum { LEN = 3 * 4096 };

static int target(int rd, int wr)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[1]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qi);
	char *before = strdup("before"), *buf = malloc(LEN), *after = strdup("after");
	memset(buf, '.', LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!qp || !mr)
		return 10;
	struct side me = { .qpn = qp->qp_num, .rkey = mr->rkey, .addr = (uintptr_t)buf }, peer;
	ibv_query_gid(ctx, 1, 1, &me.gid);
	if (xfer(wr, &me, sizeof(me), 1) || xfer(rd, &peer, sizeof(peer), 0))
		return 11;
	connect_rc(qp, peer.qpn, peer.gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	char ok = 1, done;
	if (xfer(wr, &ok, 1, 1) || xfer(rd, &done, 1, 0))
		return 12;
	/* The parent wrote 8192 bytes at buf + 1000. */
	char want[8192];
	fill(want, sizeof(want), 3);
	int bytes = !memcmp(buf + 1000, want, sizeof(want)) && buf[999] == '.' && buf[9192] == '.';
	int neighbours = !strcmp(before, "before") && !strcmp(after, "after");
	int rc = ibv_destroy_qp(qp) | ibv_dereg_mr(mr) | ibv_destroy_cq(cq) | ibv_dealloc_pd(pd) |
		 ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	return !bytes ? 13 : !neighbours ? 14 : rc ? 15 : 0;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int down[2], up[2];
	if (pipe(down) || pipe(up))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		close(down[1]);
		close(up[0]);
		_exit(target(down[0], up[1]));
	}
	close(down[0]);
	close(up[1]);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qi);
	char *src = malloc(16384);
	struct ibv_mr *mr = ibv_reg_mr(pd, src, 16384, IBV_ACCESS_LOCAL_WRITE);
	struct side me = { .qpn = qp->qp_num }, peer;
	ibv_query_gid(ctx, 1, 1, &me.gid);
	char ready;
	if (xfer(up[0], &peer, sizeof(peer), 0) || xfer(down[1], &me, sizeof(me), 1) ||
	    xfer(up[0], &ready, 1, 0)) {
		printf("the target did not start\n");
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		return 1;
	}
	/* As connect_rc, with a local ACK timeout of ~1 s (18), so that packets held by the
	 * stopped target are retried once it runs, not failed while it is stopped. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return 2;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer.qpn;
	a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12; a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid; a.ah_attr.grh.sgid_index = 1; a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return 3;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 18; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return 4;

	int status;
	kill(child, SIGSTOP);
	waitpid(child, &status, WUNTRACED);
	printf("target stopped: %s\n", WIFSTOPPED(status) ? "yes" : "no");
	fill(src, 8192, 3);
	memset(src + 8192, 0, 8192);
	struct ibv_sge ws = { .addr = (uintptr_t)src, .length = 8192, .lkey = mr->lkey };
	struct ibv_sge rs = { .addr = (uintptr_t)(src + 8192), .length = 8192, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = peer.addr + 1000, .rkey = peer.rkey } };
	struct ibv_send_wr r = w, *bad;
	r.wr_id = 2;
	r.sg_list = &rs;
	r.opcode = IBV_WR_RDMA_READ;
	struct ibv_wc wc[2];
	int got = 0;
	if (ibv_post_send(qp, &w, &bad) == 0)
		got += poll_for(cq, &wc[got], 0.05);
	if (ibv_post_send(qp, &r, &bad) == 0)
		got += poll_for(cq, &wc[got], 0.05);
	printf("completed while the target was stopped: %d of 2\n", got);
	kill(child, SIGCONT);
	while (got < 2 && poll_for(cq, &wc[got], 20))
		got++;
	for (int i = 0; i < got; i++)
		printf("wc: wr_id=%llu status=%s opcode=%d byte_len=%u qp=%s\n",
		       (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status), wc[i].opcode,
		       wc[i].byte_len, wc[i].qp_num == qp->qp_num ? "ours" : "other");
	printf("read back: %s\n", memcmp(src, src + 8192, 8192) ? "wrong" : "the bytes written");
	char done = 1;
	xfer(down[1], &done, 1, 1);
	waitpid(child, &status, 0);
	printf("target: %s\n", WIFEXITED(status) ? (WEXITSTATUS(status) == 0 ? "bytes and neighbours ok, exited 0" : "failed") : "killed");
	if (WIFEXITED(status) && WEXITSTATUS(status))
		printf("target exit %d\n", WEXITSTATUS(status));
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}

/*
 * checks.c - what softverbs' libibverbs.so.1 answers to bad input and to verbs it does not
 * have (errno as libibverbs gives it, the process running on), and a completion channel whose
 * fd works with poll(). Each check prints one line "name: result"; tests/checks.rs compares
 * them with the expected lines.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "verbs_common.h"

#define SHOW(name, expr) do { errno = 0; long r_ = (long)(expr); \
	printf("%s: %s errno=%s\n", name, r_ ? "nonzero" : "zero", errname(errno)); } while (0)
#define SHOW_RC(name, expr) do { errno = 0; int r_ = (expr); \
	printf("%s: rc=%s\n", name, errname(r_ < 0 ? errno : r_)); } while (0)

static const char *errname(int e)
{
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case EBUSY: return "EBUSY";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOSYS: return "ENOSYS";
	case ENODATA: return "ENODATA";
	case ENOENT: return "ENOENT";
	default: return "other";
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);

	/* The async event fd: the port came up as the device opened (IBV_EVENT_PORT_ACTIVE). */
	struct pollfd afd = { .fd = ctx->async_fd, .events = POLLIN };
	printf("async fd readable: %d\n", poll(&afd, 1, 0));
	struct ibv_async_event ev;
	SHOW_RC("get_async_event", ibv_get_async_event(ctx, &ev));
	printf("async event: %s, port %d\n", ibv_event_type_str(ev.event_type), ev.element.port_num);
	ibv_ack_async_event(&ev);
	printf("async fd readable after: %d\n", poll(&afd, 1, 0));

	SHOW("alloc_pd(NULL)", ibv_alloc_pd(NULL));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, 4096);
	SHOW("reg_mr(ZERO_BASED)", ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	SHOW_RC("dealloc_pd(in use)", ibv_dealloc_pd(pd));
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	ibv_dealloc_pd(pd2);
	SHOW_RC("dealloc_pd(destroyed)", ibv_dealloc_pd(pd2));
	SHOW_RC("dereg_mr(NULL)", ibv_dereg_mr(NULL));
	struct ibv_port_attr pa;
	SHOW_RC("query_port(2)", ibv_query_port(ctx, 2, &pa));
	struct ibv_gid_entry ge;
	SHOW_RC("query_gid_ex(99)", ibv_query_gid_ex(ctx, 1, 99, &ge, 0));
	SHOW("alloc_mw(type 3)", ibv_alloc_mw(pd, 3));
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1 };
	SHOW("open_xrcd", ibv_open_xrcd(ctx, &xa));
	struct ibv_cq_init_attr_ex cxa = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	SHOW("create_cq_ex(timestamps)", ibv_create_cq_ex(ctx, &cxa));

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0x5eed, ch, 0);
	SHOW_RC("destroy_comp_channel(in use)", ibv_destroy_comp_channel(ch));
	struct ibv_qp_init_attr xi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_XRC_SEND,
				       .cap = { .max_send_wr = 1, .max_send_sge = 1 } };
	SHOW("create_qp(XRC_SEND)", ibv_create_qp(pd, &xi));
	struct ibv_qp_init_attr qi = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qi), *b = ibv_create_qp(pd, &qi);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	connect_rc(a, b->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	connect_rc(b, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	SHOW_RC("attach_mcast", ibv_attach_mcast(a, &gid, 0));

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_BIND_MW,
				  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	SHOW_RC("post_send(BIND_MW of no window)", ibv_post_send(a, &wr, &bad));
	printf("bad_wr names it: %s\n", bad == &wr ? "yes" : "no");

	/* The channel's fd: not readable before an event, readable after one. */
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	ibv_req_notify_cq(cq, 0);
	printf("fd readable before: %d\n", poll(&pfd, 1, 0));
	struct ibv_sge rsge = { .addr = (uintptr_t)buf + 64, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	ibv_post_recv(b, &rwr, &rbad);
	strcpy(buf, "evented");
	wr.opcode = IBV_WR_SEND;
	ibv_post_send(a, &wr, &bad);
	printf("fd readable after: %d\n", poll(&pfd, 1, 10000));
	struct ibv_cq *ecq; void *ectx;
	SHOW_RC("get_cq_event", ibv_get_cq_event(ch, &ecq, &ectx));
	printf("event names the cq: %s, context %p\n", ecq == cq ? "yes" : "no", ectx);
	ibv_ack_cq_events(cq, 1);
	printf("comp_events_completed: %u\n", cq->comp_events_completed);
	struct ibv_wc wc[2];
	int n = 0;
	for (int spins = 0; n < 2 && spins < 10000000; spins++)
		n += ibv_poll_cq(cq, 2 - n, wc + n);
	printf("completions: %d, received: %s\n", n, buf + 64);

	/* An extended CQ as the receive CQ of a third QP: ibv_start_poll / ibv_wc_read_*. */
	struct ibv_cq_init_attr_ex ea = { .cqe = 8, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM };
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ea);
	struct ibv_poll_cq_attr pattr = { .comp_mask = 0 };
	printf("start_poll on empty: %s\n", errname(ibv_start_poll(cqx, &pattr)) );
	struct ibv_qp_init_attr qx = qi;
	qx.recv_cq = ibv_cq_ex_to_cq(cqx);
	struct ibv_qp *c3 = ibv_create_qp(pd, &qx);
	connect_rc(c3, a->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	/* a was connected to b: back to RESET, then connected to c3. */
	struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
	ibv_modify_qp(a, &reset, IBV_QP_STATE);
	connect_rc(a, c3->qp_num, gid, IBV_ACCESS_REMOTE_WRITE);
	rwr.wr_id = 33;
	ibv_post_recv(c3, &rwr, &rbad);
	strcpy(buf, "ex");
	wr.wr_id = 3;
	ibv_post_send(a, &wr, &bad);
	int rc;
	for (int spins = 0; (rc = ibv_start_poll(cqx, &pattr)) == ENOENT && spins < 10000000; spins++)
		;
	printf("cq_ex: rc=%s wr_id=%llu status=%d opcode=%d byte_len=%u qp_num ok=%s\n", errname(rc),
	       (unsigned long long)cqx->wr_id, cqx->status, ibv_wc_read_opcode(cqx),
	       ibv_wc_read_byte_len(cqx), ibv_wc_read_qp_num(cqx) == c3->qp_num ? "yes" : "no");
	printf("next_poll: %s\n", errname(ibv_next_poll(cqx)));
	ibv_end_poll(cqx);
	ibv_destroy_qp(c3);
	SHOW_RC("destroy_cq(cq_ex)", ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	SHOW_RC("destroy_qp(destroyed)", ibv_destroy_qp(a));
	ibv_destroy_cq(cq);
	SHOW_RC("destroy_comp_channel", ibv_destroy_comp_channel(ch));
	ibv_dereg_mr(mr);
	SHOW_RC("dealloc_pd", ibv_dealloc_pd(pd));
	SHOW_RC("close_device", ibv_close_device(ctx));
	printf("still running\n");
	return 0;
}

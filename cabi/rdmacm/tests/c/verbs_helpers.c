/* The rdma_verbs.h helpers on softverbs' librdmacm, checked in one process (tests/ep.rs runs
 * it): two connected ids whose QPs rdma_create_qp made with CQs and completion channels of
 * their own, the passive one on an SRQ of rdma_create_srq; then rdma_reg_msgs / _read /
 * _write, rdma_post_send (also inline, without an MR), rdma_post_recv (to the SRQ),
 * rdma_post_sendv / _recvv, rdma_post_write / _writev, rdma_post_read / _readv,
 * rdma_get_send_comp and rdma_get_recv_comp, each completion's fields and the bytes that
 * landed printed. Usage: verbs_helpers PORT */
#include "cm_common.h"
#include <rdma/rdma_verbs.h>

/* One send-side completion through rdma_get_send_comp (it waits on id->send_cq_channel). */
static void send_comp(struct rdma_cm_id *id, const char *what)
{
	struct ibv_wc wc;

	CHECK(rdma_get_send_comp(id, &wc) == 1);
	printf("%s: send comp status %d opcode %d wr_id %lu\n", what, wc.status, wc.opcode,
	       (unsigned long)wc.wr_id);
}

static void recv_comp(struct rdma_cm_id *id, const char *what, const char *buf)
{
	struct ibv_wc wc;

	CHECK(rdma_get_recv_comp(id, &wc) == 1);
	printf("%s: recv comp status %d opcode %d wr_id %lu byte_len %u: %s\n", what, wc.status,
	       wc.opcode, (unsigned long)wc.wr_id, wc.byte_len, buf);
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen, *act, *pas;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 } };
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 2 } };
	char abuf[64] = "one", a2[64] = "two", pbuf[64], p2[64], region[64] = "", back[64] = "";
	struct ibv_mr *amr, *a2mr, *pmr, *p2mr, *wmr, *rmr, *bmr;
	struct ibv_sge sg[2];

	if (argc != 2)
		return 2;
	loopback_pair(atoi(argv[1]), &listen, &act);
	CHECK(rdma_create_qp(act, NULL, &ia) == 0);
	printf("CM-made CQs: %s\n", act->send_cq && act->recv_cq && act->send_cq_channel &&
	       act->recv_cq_channel && ia.send_cq == act->send_cq ? "yes" : "no");
	CHECK(rdma_connect(act, NULL) == 0);
	pas = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_create_srq(pas, NULL, &sa) == 0);
	memset(&ia.send_cq, 0, sizeof(ia.send_cq) * 2);
	ia.srq = NULL;
	CHECK(rdma_create_qp(pas, NULL, &ia) == 0);
	printf("passive QP on the SRQ: %s\n", pas->qp->srq == pas->srq && pas->srq ? "yes" : "no");
	CHECK(rdma_accept(pas, NULL) == 0);
	expect(RDMA_CM_EVENT_ESTABLISHED);
	expect(RDMA_CM_EVENT_ESTABLISHED);

	CHECK(amr = rdma_reg_msgs(act, abuf, sizeof(abuf)));
	CHECK(a2mr = rdma_reg_msgs(act, a2, sizeof(a2)));
	CHECK(pmr = rdma_reg_msgs(pas, pbuf, sizeof(pbuf)));
	CHECK(p2mr = rdma_reg_msgs(pas, p2, sizeof(p2)));

	/* SEND to a receive posted on the SRQ. */
	CHECK(rdma_post_recv(pas, (void *)11, pbuf, sizeof(pbuf), pmr) == 0);
	CHECK(rdma_post_send(act, (void *)1, abuf, 4, amr, IBV_SEND_SIGNALED) == 0);
	send_comp(act, "post_send");
	recv_comp(pas, "post_recv", pbuf);

	/* Inline, without an MR. */
	CHECK(rdma_post_recv(pas, (void *)12, pbuf, sizeof(pbuf), pmr) == 0);
	CHECK(rdma_post_send(act, (void *)2, "inline", 7, NULL,
			     IBV_SEND_SIGNALED | IBV_SEND_INLINE) == 0);
	send_comp(act, "inline");
	recv_comp(pas, "inline", pbuf);

	/* Two SGEs each side: "one" at 0 and "two" after it, scattered over pbuf and p2. */
	memset(pbuf, 0, sizeof(pbuf));
	sg[0] = (struct ibv_sge){ (uintptr_t)pbuf, 3, pmr->lkey };
	sg[1] = (struct ibv_sge){ (uintptr_t)p2, 4, p2mr->lkey };
	CHECK(rdma_post_recvv(pas, (void *)13, sg, 2) == 0);
	sg[0] = (struct ibv_sge){ (uintptr_t)abuf, 3, amr->lkey };
	sg[1] = (struct ibv_sge){ (uintptr_t)a2, 4, a2mr->lkey };
	CHECK(rdma_post_sendv(act, (void *)3, sg, 2, IBV_SEND_SIGNALED) == 0);
	send_comp(act, "post_sendv");
	recv_comp(pas, "post_recvv", p2);
	printf("post_recvv: first sge %.3s\n", pbuf);

	/* RDMA WRITE into a region the passive side registered for it, then READ it back. */
	CHECK(wmr = rdma_reg_write(pas, region, sizeof(region)));
	CHECK(rdma_post_write(act, (void *)4, abuf, 4, amr, IBV_SEND_SIGNALED,
			      (uintptr_t)region, wmr->rkey) == 0);
	send_comp(act, "post_write");
	sg[0] = (struct ibv_sge){ (uintptr_t)a2, 3, a2mr->lkey };
	CHECK(rdma_post_writev(act, (void *)5, sg, 1, IBV_SEND_SIGNALED,
			       (uintptr_t)region + 3, wmr->rkey) == 0);
	send_comp(act, "post_writev");
	printf("region: %s\n", region);
	CHECK(rmr = rdma_reg_read(pas, region, sizeof(region)));
	CHECK(bmr = rdma_reg_msgs(act, back, sizeof(back)));
	CHECK(rdma_post_read(act, (void *)6, back, 3, bmr, IBV_SEND_SIGNALED,
			     (uintptr_t)region, rmr->rkey) == 0);
	send_comp(act, "post_read");
	sg[0] = (struct ibv_sge){ (uintptr_t)back + 3, 4, bmr->lkey };
	CHECK(rdma_post_readv(act, (void *)7, sg, 1, IBV_SEND_SIGNALED,
			      (uintptr_t)region + 3, rmr->rkey) == 0);
	send_comp(act, "post_readv");
	printf("read back: %s\n", back);

	CHECK(rdma_disconnect(act) == 0);
	/* The passive side answers its DISCONNECTED with rdma_disconnect (its DREP, as with the
	 * kernel's CM): the active side's DISCONNECTED follows. */
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == pas);
	CHECK(rdma_disconnect(pas) == 0);
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == act);
	CHECK(rdma_dereg_mr(amr) == 0 && rdma_dereg_mr(a2mr) == 0 && rdma_dereg_mr(pmr) == 0);
	CHECK(rdma_dereg_mr(p2mr) == 0 && rdma_dereg_mr(wmr) == 0 && rdma_dereg_mr(rmr) == 0);
	CHECK(rdma_dereg_mr(bmr) == 0);
	rdma_destroy_qp(act);
	rdma_destroy_qp(pas);
	rdma_destroy_srq(pas);
	printf("after destroy: %s\n", !act->send_cq && !act->recv_cq && !pas->srq &&
	       !pas->recv_cq_channel ? "CQs, channels and SRQ gone" : "left over");
	CHECK(rdma_destroy_id(pas) == 0);
	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

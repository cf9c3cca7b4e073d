/* srq_ep.c: a QP made by rdma_create_qp on the program's own SRQ (ibv_create_srq, as
 * libfabric's verbs provider makes its shared receive context) leaves the SRQ the program's:
 * id->srq stays NULL (librdmacm sets it only in rdma_create_srq), and rdma_destroy_ep destroys
 * the id's QP but not that SRQ, which the program still uses for its other QPs and destroys
 * itself. Before, the SRQ went with the first endpoint, and libfabric's ibv_destroy_srq at
 * fi_close was refused (EINVAL). One process. Usage: srq_ep PORT */
#include "cm_common.h"

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen, *act;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	struct ibv_pd *pd;
	struct ibv_srq *srq;

	if (argc != 2)
		return 2;
	loopback_pair(atoi(argv[1]), &listen, &act);
	CHECK(pd = ibv_alloc_pd(act->verbs));
	CHECK(srq = ibv_create_srq(pd, &sa));
	ia.srq = srq;
	CHECK(rdma_create_qp(act, pd, &ia) == 0);
	printf("id->srq after rdma_create_qp: %s\n", act->srq ? "set" : "NULL");
	rdma_destroy_ep(act);
	printf("the SRQ after rdma_destroy_ep: post_srq_recv %s\n",
	       ibv_post_srq_recv(srq, &wr, &bad) == 0 ? "ok" : "refused");
	printf("ibv_destroy_srq: %d\n", ibv_destroy_srq(srq));
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* IPv6 link-local addresses in the CM, checked in one process (tests/ipv6.rs runs it): a
 * softverbs port's address fe80::<EUI-64> with a scope id, through rdma_getaddrinfo,
 * rdma_bind_addr (to ::), rdma_resolve_addr, rdma_connect / rdma_accept, the ids' routes, the
 * QP's path (GID index 0, the peer's link-local GID) and a SEND over it; then a link-local
 * address without a scope id and one of no softverbs port. Usage: ipv6 PORT */
#include <net/if.h>
#include "cm_common.h"

/* An address as text: IPv6 with its scope's interface name, or IPv4. */
static const char *show(struct sockaddr *sa)
{
	static char out[2][96];
	static int k;
	char a[INET6_ADDRSTRLEN], ifn[IF_NAMESIZE] = "";
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
	char *o = out[k++ & 1];

	if (sa->sa_family != AF_INET6) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, a, sizeof(a));
		snprintf(o, 96, "IPv4 %s", a);
		return o;
	}
	inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
	if (s6->sin6_scope_id)
		if_indextoname(s6->sin6_scope_id, ifn);
	snprintf(o, 96, "%s%s%s", a, *ifn ? "%" : "", ifn);
	return o;
}

static const char *gid(const uint8_t *raw)
{
	static char out[2][INET6_ADDRSTRLEN];
	static int k;
	char *o = out[k++ & 1];

	inet_ntop(AF_INET6, raw, o, INET6_ADDRSTRLEN);
	return o;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct rdma_cm_id *listen, *act, *pas, *bad;
	struct sockaddr_in6 any = { .sin6_family = AF_INET6 }, ll;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_init_attr qia;
	struct ibv_qp_attr qa;
	char abuf[32] = "over IPv6", pbuf[32] = "";
	struct ibv_mr *amr, *pmr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *bad_r;
	struct ibv_send_wr swr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bad_s;
	struct ibv_wc wc;
	int n;

	if (argc != 2)
		return 2;
	CHECK(ch = rdma_create_event_channel());

	/* rdma_getaddrinfo keeps the address as IPv6, with its scope id. */
	CHECK(rdma_getaddrinfo("fe80::aff:fe00:1%lo", argv[1], &hints, &res) == 0);
	printf("getaddrinfo: family %s, %u bytes, %s\n",
	       res->ai_family == AF_INET6 ? "AF_INET6" : "?", res->ai_dst_len,
	       show(res->ai_dst_addr));

	any.sin6_port = htons(atoi(argv[1]));
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	printf("listener: %s\n", show(rdma_get_local_addr(listen)));

	CHECK(rdma_create_id(ch, &act, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(act, NULL, res->ai_dst_addr, 2000) == 0);
	expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(act, 2000) == 0);
	expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
	printf("active: %s -> %s, sgid %s, dgid %s\n", show(rdma_get_local_addr(act)),
	       show(rdma_get_peer_addr(act)), gid(act->route.addr.addr.ibaddr.sgid.raw),
	       gid(act->route.addr.addr.ibaddr.dgid.raw));
	qia = ia;
	CHECK(rdma_create_qp(act, NULL, &qia) == 0);
	CHECK(rdma_connect(act, NULL) == 0);

	pas = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	printf("passive: %s -> %s\n", show(rdma_get_local_addr(pas)),
	       show(rdma_get_peer_addr(pas)));
	qia = ia;
	CHECK(rdma_create_qp(pas, NULL, &qia) == 0);
	CHECK(pmr = ibv_reg_mr(pas->pd, pbuf, sizeof(pbuf), IBV_ACCESS_LOCAL_WRITE));
	sge = (struct ibv_sge){ (uintptr_t)pbuf, sizeof(pbuf), pmr->lkey };
	CHECK(ibv_post_recv(pas->qp, &rwr, &bad_r) == 0);
	CHECK(rdma_accept(pas, NULL) == 0);
	expect(RDMA_CM_EVENT_ESTABLISHED);
	expect(RDMA_CM_EVENT_ESTABLISHED);

	CHECK(ibv_query_qp(act->qp, &qa, IBV_QP_AV, &qia) == 0);
	printf("active QP: sgid_index %u, dgid %s\n", qa.ah_attr.grh.sgid_index,
	       gid(qa.ah_attr.grh.dgid.raw));
	CHECK(amr = ibv_reg_mr(act->pd, abuf, sizeof(abuf), IBV_ACCESS_LOCAL_WRITE));
	sge = (struct ibv_sge){ (uintptr_t)abuf, sizeof(abuf), amr->lkey };
	CHECK(ibv_post_send(act->qp, &swr, &bad_s) == 0);
	for (n = 0; n < 5000000 && ibv_poll_cq(pas->recv_cq, 1, &wc) == 0; n++)
		;
	CHECK(n < 5000000 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
	printf("received: %s\n", pbuf);

	CHECK(rdma_disconnect(act) == 0);
	/* The passive side answers its DISCONNECTED with rdma_disconnect (its DREP, as with the
	 * kernel's CM): the active side's DISCONNECTED follows. */
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == pas);
	CHECK(rdma_disconnect(pas) == 0);
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == act);
	rdma_destroy_qp(act);
	rdma_destroy_qp(pas);
	ibv_dereg_mr(amr);
	ibv_dereg_mr(pmr);
	CHECK(rdma_destroy_id(pas) == 0);
	CHECK(rdma_destroy_id(act) == 0);

	/* A link-local address needs its scope id; an address of no port is unreachable. */
	CHECK(rdma_create_id(ch, &bad, NULL, RDMA_PS_TCP) == 0);
	memcpy(&ll, res->ai_dst_addr, sizeof(ll));
	ll.sin6_scope_id = 0;
	n = rdma_bind_addr(bad, (struct sockaddr *)&ll);
	printf("bind without a scope id: %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");
	inet_pton(AF_INET6, "fe80::1", &ll.sin6_addr);
	ll.sin6_scope_id = 1;
	CHECK(rdma_resolve_addr(bad, NULL, (struct sockaddr *)&ll, 2000) == 0);
	expect_status(RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH, NULL);
	printf("fe80::1: ADDR_ERROR, -EHOSTUNREACH\n");
	CHECK(rdma_destroy_id(bad) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_freeaddrinfo(res);
	rdma_destroy_event_channel(ch);
	return 0;
}

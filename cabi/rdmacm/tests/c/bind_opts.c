/* Issue 30's CM fixes for pyverbs, in one process (tests/bind.rs runs it): rdma_bind_addr of a
 * loopback address binds the id to a device (verbs set, as the kernel's CM binds it to its first
 * device); a bind to an address of no soft port fails with EADDRNOTAVAIL (silent: tests/bind.rs
 * checks stderr); rdma_getaddrinfo keeps the hints' source address; RDMA_OPTION_ID_ACK_TIMEOUT
 * is each side's QP timeout once connected; hints with a destination alone, and a resolve of
 * 0.0.0.0 (loopback, as the kernel's), as libfabric's verbs provider asks. Usage: bind_opts PORT */
#include "cm_common.h"

static void show_src(const char *what, struct rdma_addrinfo *ai)
{
	char s[INET_ADDRSTRLEN] = "none";

	if (ai->ai_src_addr)
		inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_src_addr)->sin_addr, s, sizeof(s));
	printf("%s: src %s dst %s\n", what, s, ai->ai_dst_addr ? "set" : "none");
}

static void timeout_of(const char *who, struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(ibv_query_qp(id->qp, &a, IBV_QP_TIMEOUT, &ia) == 0);
	printf("%s QP timeout %u\n", who, a.timeout);
}

int main(int argc, char **argv)
{
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in foreign = { .sin_family = AF_INET };
	struct rdma_cm_id *b, *f, *listen, *act, *pas;
	struct rdma_addrinfo hints, *src, *res;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	uint8_t t;
	int n;

	if (argc != 2)
		return 2;
	CHECK(ch = rdma_create_event_channel());

	/* A loopback bind: a device, and a PD on it. */
	CHECK(rdma_create_id(ch, &b, NULL, RDMA_PS_UDP) == 0);
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&lo) == 0);
	printf("bind 127.0.0.1: verbs %s port_num %u\n", b->verbs ? "set" : "NULL", b->port_num);
	CHECK(rdma_destroy_id(b) == 0);

	/* A host address that is no soft port's (TEST-NET-1). */
	inet_pton(AF_INET, "192.0.2.1", &foreign.sin_addr);
	CHECK(rdma_create_id(ch, &f, NULL, RDMA_PS_TCP) == 0);
	n = rdma_bind_addr(f, (struct sockaddr *)&foreign);
	printf("bind 192.0.2.1: %d %s\n", n, errno == EADDRNOTAVAIL ? "EADDRNOTAVAIL" : "?");
	CHECK(rdma_destroy_id(f) == 0);

	/* rdma_getaddrinfo with a source in the hints, as pyverbs' AddrInfo(src=, dst=). */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_UDP;
	CHECK(rdma_getaddrinfo("127.0.0.1", NULL, &hints, &src) == 0);
	hints.ai_flags = 0;
	hints.ai_src_addr = src->ai_src_addr;
	hints.ai_src_len = src->ai_src_len;
	CHECK(rdma_getaddrinfo("127.0.0.1", argv[1], &hints, &res) == 0);
	show_src("getaddrinfo(dst, hints src)", res);
	rdma_freeaddrinfo(res);
	CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &res) == 0);
	show_src("getaddrinfo(hints src only)", res);
	rdma_freeaddrinfo(res);
	hints.ai_dst_addr = src->ai_src_addr;
	hints.ai_dst_len = src->ai_src_len;
	hints.ai_src_addr = NULL;
	hints.ai_src_len = 0;
	CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &res) == 0);
	show_src("getaddrinfo(hints dst only)", res);
	rdma_freeaddrinfo(res);
	rdma_freeaddrinfo(src);
	n = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	printf("getaddrinfo(nothing): %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");

	/* The any address resolves as loopback (the kernel's cma_resolve_loopback). */
	CHECK(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0);
	foreign.sin_addr.s_addr = htonl(INADDR_ANY);
	foreign.sin_port = htons(atoi(argv[1]));
	CHECK(rdma_resolve_addr(b, NULL, (struct sockaddr *)&foreign, 2000) == 0);
	expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	printf("resolve 0.0.0.0: resolved, verbs %s\n", b->verbs ? "set" : "NULL");
	CHECK(rdma_destroy_id(b) == 0);

	/* The ACK timeout each side sets reaches its QP. */
	loopback_pair(atoi(argv[1]), &listen, &act);
	t = 12;
	n = rdma_set_option(act, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, 4);
	printf("ack timeout of 4 bytes: %d %s\n", n, errno == EINVAL ? "EINVAL" : "?");
	CHECK(rdma_create_qp(act, NULL, &ia) == 0);
	CHECK(rdma_set_option(act, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, 1) == 0);
	CHECK(rdma_connect(act, &cp) == 0);
	pas = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_create_qp(pas, NULL, &ia) == 0);
	t = 9;
	CHECK(rdma_set_option(pas, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, 1) == 0);
	CHECK(rdma_accept(pas, &cp) == 0);
	expect(RDMA_CM_EVENT_ESTABLISHED);
	expect(RDMA_CM_EVENT_ESTABLISHED);
	timeout_of("active", act);
	timeout_of("passive", pas);
	CHECK(rdma_disconnect(act) == 0);
	/* The passive side answers its DISCONNECTED with rdma_disconnect (its DREP, as with the
	 * kernel's CM): the active side's DISCONNECTED follows. */
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == pas);
	CHECK(rdma_disconnect(pas) == 0);
	CHECK(expect(RDMA_CM_EVENT_DISCONNECTED) == act);
	rdma_destroy_qp(act);
	rdma_destroy_qp(pas);
	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(pas) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* issue 30 from C (tests/more.rs runs it): rdma_get_devices lists the soft devices' contexts
 * (the ones the CM's ids use), NULL-terminated; the ECE a connecting id without a CM-made QP
 * sets is the one the passive side reads, and the REP brings back the vendor with the passive
 * side's options; rdma_notify answers as the kernel's CM; rdma_reject_ece gives REJECTED with
 * reason 35. Usage: issue30 PORT */
#include "cm_common.h"

int main(int argc, char **argv)
{
	struct rdma_cm_id *listen, *act, *pas, *act2;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7, .qp_num = 77 };
	struct ibv_ece ece = { .vendor_id = 0x15b3, .options = 0x5 }, got;
	int n = -1;

	if (argc != 2)
		return 2;
	struct ibv_context **devs = rdma_get_devices(&n);
	printf("devices: %d, terminated: %s\n", n, devs && n > 0 && !devs[n] ? "yes" : "no");
	loopback_pair(atoi(argv[1]), &listen, &act);
	int found = 0;
	for (int i = 0; i < n; i++)
		found |= devs[i] == act->verbs;
	printf("the id's context is listed: %s\n", found ? "yes" : "no");
	rdma_free_devices(devs);

	struct ibv_ece bad = { .vendor_id = 0 };
	int rc = rdma_set_local_ece(act, &bad);
	printf("set_local_ece(vendor 0): %d %s\n", rc, errno == EINVAL ? "EINVAL" : "?");
	rc = rdma_notify(act, IBV_EVENT_COMM_EST);
	printf("notify before connecting: %d %s\n", rc, errno == EINVAL ? "EINVAL" : "?");
	CHECK(rdma_set_local_ece(act, &ece) == 0);
	CHECK(rdma_connect(act, &cp) == 0);
	pas = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_get_remote_ece(pas, &got) == 0);
	printf("passive reads vendor %#x options %#x\n", got.vendor_id, got.options);
	struct ibv_ece mine = { .vendor_id = 0x15b3, .options = 0x1 };
	CHECK(rdma_set_local_ece(pas, &mine) == 0);
	cp.qp_num = 78;
	CHECK(rdma_accept(pas, &cp) == 0);
	expect_status(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, "active");
	CHECK(rdma_get_remote_ece(act, &got) == 0);
	printf("active reads vendor %#x options %#x\n", got.vendor_id, got.options);
	rc = rdma_notify(pas, IBV_EVENT_COMM_EST);
	printf("notify(COMM_EST) while connecting: %d %s\n", rc, rc ? strerror(errno) : "");
	CHECK(rdma_establish(act) == 0);
	expect(RDMA_CM_EVENT_ESTABLISHED);
	rc = rdma_notify(pas, IBV_EVENT_COMM_EST);
	printf("notify(COMM_EST) established: %d %s\n", rc, errno == EISCONN ? "EISCONN" : "?");
	rc = rdma_notify(pas, IBV_EVENT_PORT_ACTIVE);
	printf("notify(PORT_ACTIVE): %d %s\n", rc, errno == EINVAL ? "EINVAL" : "?");

	/* A second request, rejected with rdma_reject_ece. */
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(rdma_create_id(ch, &act2, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(act2, NULL, (struct sockaddr *)&dst, 2000) == 0);
	expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(act2, 2000) == 0);
	expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(rdma_connect(act2, &cp) == 0);
	struct rdma_cm_id *pas2 = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(rdma_reject_ece(pas2, NULL, 0) == 0);
	expect_status(RDMA_CM_EVENT_REJECTED, 35, "active");
	printf("reject_ece: REJECTED 35\n");
	return 0;
}

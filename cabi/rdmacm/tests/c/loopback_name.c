/* loopback_name.c: an id bound to 127.0.0.1 reports that address (rdma_get_local_addr, the
 * id's route), as the kernel's CM reports the bound address, and that name, handed to a peer as
 * libfabric's rxm hands its listener's name, is an address to connect to: the peer's REQ
 * reaches the listener. Before, the id reported 0.0.0.0, which rxm's address vector refuses as a
 * destination ("invalid address"). One process, every wait bounded (poll, 5 s).
 * Usage: loopback_name */
#include <poll.h>
#include "cm_common.h"

static struct rdma_cm_id *wait_for(enum rdma_cm_event_type want, int status)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	if (poll(&p, 1, 5000) != 1) {
		fprintf(stderr, "no event within 5 s (wanted %s)\n", rdma_event_str(want));
		exit(1);
	}
	return expect_status(want, status, "");
}

int main(void)
{
	struct sockaddr_in lo = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in name;
	struct rdma_cm_id *listen, *act, *child;
	char text[INET_ADDRSTRLEN];

	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&lo) == 0);
	CHECK(rdma_listen(listen, 1) == 0);
	memcpy(&name, rdma_get_local_addr(listen), sizeof(name));
	CHECK(inet_ntop(AF_INET, &name.sin_addr, text, sizeof(text)));
	printf("bound to 127.0.0.1, port 0: local address %s, port %s, verbs %s\n", text,
	       name.sin_port ? "picked" : "0", listen->verbs ? "set" : "NULL");
	CHECK(rdma_create_id(ch, &act, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(act, NULL, (struct sockaddr *)&name, 2000) == 0);
	wait_for(RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	CHECK(rdma_resolve_route(act, 2000) == 0);
	wait_for(RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	CHECK(rdma_connect(act, NULL) == 0);
	child = wait_for(RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	CHECK(rdma_reject(child, NULL, 0) == 0);
	wait_for(RDMA_CM_EVENT_REJECTED, 28);
	CHECK(rdma_destroy_id(child) == 0);
	CHECK(rdma_destroy_id(act) == 0);
	CHECK(rdma_destroy_id(listen) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

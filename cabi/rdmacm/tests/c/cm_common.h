/* cm_common.h: what the one-process C tests of cabi/rdmacm share. CHECK(x): a call that failed
 * names its line and errno, and the program exits 1. `ch`: the event channel. expect(want):
 * the next event on `ch` must be `want` with status 0 (expect_status: with `status`, and
 * printed as "<who> event <name>" when `who` is not NULL); it is acked and its id returned.
 * loopback_pair(port, &listen, &act): a listener on any address's `port` and an id resolved
 * (address and route) to 127.0.0.1 on it, both on `ch`. */
#ifndef CM_COMMON_H
#define CM_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "line %d: %s failed (errno %d)\n", \
	__LINE__, #x, errno); exit(1); } } while (0)

/* Unused by a program that keeps its channels itself (sync_ids.c). */
static struct rdma_event_channel *ch __attribute__((unused));

static inline struct rdma_cm_id *expect_status(enum rdma_cm_event_type want, int status,
					       const char *who)
{
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	CHECK(rdma_get_cm_event(ch, &e) == 0);
	if (who)
		printf("%s event %s\n", who, rdma_event_str(e->event));
	if (e->event != want || e->status != status) {
		fprintf(stderr, "got %s status %d, wanted %s status %d\n",
			rdma_event_str(e->event), e->status, rdma_event_str(want), status);
		exit(1);
	}
	id = e->id;
	CHECK(rdma_ack_cm_event(e) == 0);
	return id;
}

#define expect(want) expect_status(want, 0, NULL)

static inline void loopback_pair(int port, struct rdma_cm_id **listen, struct rdma_cm_id **act)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, listen, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_bind_addr(*listen, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(*listen, 1) == 0);
	CHECK(rdma_create_id(ch, act, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(*act, NULL, (struct sockaddr *)&dst, 2000) == 0);
	expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(*act, 2000) == 0);
	expect(RDMA_CM_EVENT_ROUTE_RESOLVED);
}

#endif

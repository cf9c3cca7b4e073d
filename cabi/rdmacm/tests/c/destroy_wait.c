/* destroy_wait.c: rdma_destroy_id waits until the id's events are acknowledged, as librdmacm's
 * does, so a thread still handling an event of the id never reads a freed id (rping's client
 * destroys its id while its CM thread may be handling DISCONNECTED). One thread holds the id's
 * ADDR_RESOLVED event for 300 ms while another destroys the id: the destroy returns only after
 * the acknowledgement. */
#include <pthread.h>
#include <unistd.h>
#include "cm_common.h"

static struct rdma_cm_id *id;
static int destroyed;

static void *destroyer(void *arg)
{
	(void)arg;
	CHECK(rdma_destroy_id(id) == 0);
	__atomic_store_n(&destroyed, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in dst = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_cm_event *e;
	pthread_t t;

	dst.sin_port = htons(argc > 1 ? atoi(argv[1]) : 7471);
	CHECK(ch = rdma_create_event_channel());
	CHECK(rdma_create_id(ch, &id, (void *)0x5eed, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(rdma_get_cm_event(ch, &e) == 0);
	printf("event %s\n", rdma_event_str(e->event));
	CHECK(pthread_create(&t, NULL, destroyer, NULL) == 0);
	usleep(300000);
	printf("destroy returned before the ack: %s\n",
	       __atomic_load_n(&destroyed, __ATOMIC_SEQ_CST) ? "yes" : "no");
	printf("the event's id still holds its context: %s\n",
	       e->id->context == (void *)0x5eed ? "yes" : "no");
	CHECK(rdma_ack_cm_event(e) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	printf("destroy returned after the ack: %s\n",
	       __atomic_load_n(&destroyed, __ATOMIC_SEQ_CST) ? "yes" : "no");
	rdma_destroy_event_channel(ch);
	return 0;
}

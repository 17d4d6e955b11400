/* subscribe.c - the redis backend's subscriber connection: what other replicas publish. */
#include "redis_internal.h"

static void on_published(redisAsyncContext *ac, void *r, void *priv)
{
    rb_t *rb = priv;
    redisReply *rep = r;
    (void)ac;
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 || rb->freeing) return;
    if (rep->element[2]->type != REDIS_REPLY_STRING) return;
    char *msg = rep->element[2]->str;
    char *sep = strchr(msg, '\x1e');
    if (!sep) return;
    *sep = '\0';
    if (strcmp(msg, rb->opt.replica_id) == 0) return; /* ours came back in the reply */
    for (char *part = sep + 1; part;) {
        char *next = strchr(part, '\x1e');
        if (next) *next++ = '\0';
        sl_event_t ev;
        bool ok = sl__wire_event(part, &ev);
        if (ok) sl__rb_note_margin(rb, &ev);
        /* Only what a waiting request needs: the holder answers it. */
        if (ok &&
            ((ev.kind == SL_EV_GRANTED && ev.ticket) || ev.kind == SL_EV_TICKET_CANCELLED ||
             ev.kind == SL_EV_TICKET_EXPIRED || ev.kind == SL_EV_TICKET_REJECTED))
            sl__rb_queue_event(rb, &ev);
        part = next;
    }
}

void sl__rb_subscribe(rb_t *rb)
{
    if (rb->sub) return;
    redisAsyncContext *sub = redisAsyncConnect(rb->opt.host, rb->opt.port);
    if (!sub || sub->err) {
        if (sub) redisAsyncFree(sub);
        return;
    }
    sub->data = rb;
    redisLibeventAttach(sub, rb->evbase);
    redisAsyncSetDisconnectCallback(sub, sl__rb_on_disconnect);
    if (rb->opt.password[0]) redisAsyncCommand(sub, NULL, NULL, "AUTH %s", rb->opt.password);
    redisAsyncCommand(sub, on_published, rb, "SUBSCRIBE sluice:events");
    rb->sub = sub;
}

/* comms.c — the one owner of an engine's communicators: the world (the caller's), and under
 * HYBRID_SHARD the shard group (gathers, reduce-scatters) and the replica group (the across-group
 * all-reduce), both split and freed here. Every call that labels, progresses or gives up a buffer on
 * "the engine's communicators" goes through this file, so none of them can be forgotten. */
#include "shard/shard.h"
#include "comm/comm_plan.h"

fsdp_status shard_comms_init(fsdp_engine_t *e, fsdp_comm_t *world) {
    e->comm = world;
    e->rank = fsdp_comm_rank(world);
    e->world = fsdp_comm_size(world);
    e->shard_comm = world;
    e->rep_comm = NULL;
    e->srank = e->rank;
    e->sworld = e->world;
    e->grp = 0;
    e->ngrp = 1;
    if (e->cfg.strategy != FSDP_HYBRID_SHARD) return FSDP_OK;
    int g = e->cfg.shard_group > 0 ? e->cfg.shard_group : fsdp_comm_local_size(world);
    if (g < 1 || e->world % g != 0)
        return FSDP_ERR(FSDP_EINVAL,
                        "HYBRID_SHARD: shard_group %d (%s) does not divide the world size %d; choose a "
                        "divisor (the ranks of one host are the usual group)",
                        g, e->cfg.shard_group > 0 ? "given" : "the ranks of this host", e->world);
    e->sworld = g;
    e->srank = e->rank % g;
    e->grp = e->rank / g;
    e->ngrp = e->world / g;
    fsdp_status st = FSDP_OK;
    if (g < e->world) st = fsdp_comm_split(world, e->grp, e->rank, &e->shard_comm);
    if (st == FSDP_OK && e->ngrp > 1) st = fsdp_comm_split(world, e->srank, e->rank, &e->rep_comm);
    if (st != FSDP_OK) {
        shard_comms_free(e);
        e->shard_comm = world;
    }
    return st;
}

void shard_comms_free(fsdp_engine_t *e) {
    if (e->rep_comm) fsdp_comm_free(e->rep_comm);
    if (e->shard_comm != e->comm) fsdp_comm_free(e->shard_comm);
    e->rep_comm = NULL;
    e->shard_comm = e->comm;
}

void shard_progress(fsdp_engine_t *e) {
    fsdp_comm_progress(e->comm);
    if (e->shard_comm != e->comm) fsdp_comm_progress(e->shard_comm);
    if (e->rep_comm) fsdp_comm_progress(e->rep_comm);
}

void shard_comms_set_label(fsdp_engine_t *e, const char *label) {
    fsdp_comm_set_label(e->comm, label);
    if (e->shard_comm != e->comm) fsdp_comm_set_label(e->shard_comm, label);
    if (e->rep_comm) fsdp_comm_set_label(e->rep_comm, label);
}

void shard_set_label(fsdp_unit_t *u, const char *phase) {
    char label[256];
    snprintf(label, sizeof label, "unit %s / %s", u->name, phase);
    shard_comms_set_label(u->eng, label);
}

void shard_drop(fsdp_comm_t *c, fsdp_status st, void *buf) {
    if (st == FSDP_ETIMEOUT)
        fsdp_comm_adopt_buffer(c, buf); /* the timed-out collective on c may still write it */
    else
        fsdp_mem_free(buf);
}

void shard_drop_device(fsdp_engine_t *e, fsdp_comm_t *c, fsdp_status st, void *buf) {
    if (e->dev == fsdp_device_cpu()) { /* the tracked allocator's block */
        shard_drop(c, st, buf);
        return;
    }
    /* Another device's block: freed through it; after a timeout it is left to the end of the process
     * (the communicator frees only what the tracked allocator made, and it is broken from then on). */
    if (st != FSDP_ETIMEOUT) e->dev->free(e->dev, buf, e->compute);
}

fsdp_status shard_handoff(fsdp_engine_t *e, fsdp_comm_t *c, fsdp_event_t *ev, fsdp_stream_t *s) {
    if (!(comm_caps(c) & COMM_CAP_HOST_POLL)) /* no row orders a collective on a stream yet */
        return FSDP_ERR(FSDP_EUNSUPPORTED, "transport %s: no host-polled path and no stream-ordered one",
                        fsdp_comm_backend_name(c));
    e->dev->record(e->dev, ev, s);
    return e->dev->event_sync(e->dev, ev);
}

fsdp_status shard_host_catch_up(fsdp_engine_t *e) {
    if (!e->cfg.host_kernels || !(e->dev->caps & FSDP_DEV_ASYNC)) return FSDP_OK;
    e->dev->record(e->dev, e->ev_compute, e->compute);
    return e->dev->event_sync(e->dev, e->ev_compute);
}

/*
 * The handover protocol: a one-shot `isolate` CLI (cmd/isolate/handover.c)
 * hands its run to the running service (package handover) over a unix
 * stream socket. Both ends are one build on one machine: integers are in
 * the machine's byte order. doc.go describes the conversation.
 */
#ifndef ISOLATE_HANDOVER_PROTOCOL_H
#define ISOLATE_HANDOVER_PROTOCOL_H

/* The request's header: magic, then the length of the body that follows. */
#define HANDOVER_MAGIC 0x314f4849u /* "IHO1" */
#define HANDOVER_MAX_BODY 8388608u /* 8 MiB */
/* Descriptors attached to the request's first byte: stdin, stdout,
 * stderr, and the working directory (O_PATH). */
#define HANDOVER_NFDS 4

/* The service's answers: a tag and two numbers. */
#define HANDOVER_ACCEPTED 'A' /* the run is the service's now */
#define HANDOVER_DECLINED 'D' /* a: length of the reason that follows */
#define HANDOVER_EXIT 'X'     /* a: exit status, b: signal to die of (0: none) */

#endif

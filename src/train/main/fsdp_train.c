/* fsdp_train.c — main() of `fsdp-train`: parses the command line, starts the communicator (MPI under
 * mpirun, else a world of one), runs the command and turns its status into a message and an exit code
 * (0 fine, 2 bad command line, 1 anything else; docs/TRAINER.md). All the work lives in the fsdp_train
 * library. */
#include "fsdp.h"
#include "core/core.h"
#include "train/config.h"
#include "data/chat.h"
#include "data/data.h"
#include "train/train.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Exit code of a failure: 2 when the command line is wrong (a flag's value, or flags that do not fit
 * the launcher's ranks, the data or the checkpoint folder: FSDP_EINVAL, found before or after launch),
 * 1 for anything else. Every rank of an agreed failure exits with the failing rank's code. */
static int exit_code(fsdp_status s) { return s == FSDP_OK ? 0 : s == FSDP_EINVAL ? 2 : 1; }

/* One message per failure: rank 0's, plus the failing rank's own when another rank failed first.
 * When the failure was not agreed on (a rank failed alone mid-collective), every failing rank says
 * its own. */
static void report(fsdp_status s, int rank, int world, int agreed_rank) {
    const char *msg = fsdp_last_error();
    if (world > 1 && agreed_rank >= 0 && rank != 0 && rank != agreed_rank) return;
    if (world > 1)
        fprintf(stderr, "fsdp-train: [rank %d] error: %s\n", rank, msg[0] ? msg : fsdp_strerror(s));
    else
        fprintf(stderr, "fsdp-train: error: %s\n", msg[0] ? msg : fsdp_strerror(s));
}

/* 1 when every rank knows of the failure s: another rank's (FSDP_EPEER, from an agreement), or this
 * rank's own, passed to an agreement that found it (the lowest failing rank's, or a later one's). */
static int agreed_failure(const fsdp_comm_t *comm, fsdp_status s) {
    return s == FSDP_EPEER || (s != FSDP_OK && fsdp_comm_agreed_failure(comm, NULL) >= 0);
}

static fsdp_status prepare(const fsdp_train_config *c) {
    fsdp_prepare_args a = {.texts = c->texts,
                           .n_texts = c->n_texts,
                           .out_dir = c->out,
                           .val_fraction = c->val_fraction,
                           .doc_sep = c->doc_sep,
                           .tokenizer = c->tokenizer,
                           .jsonl = c->jsonl,
                           .chat_format = c->chat_format};
    fsdp_prepare_stats st;
    fsdp_status s = fsdp_prepare(&a, &st);
    if (s == FSDP_OK && c->jsonl)
        printf(
            "prepared %s: %llu rows of %s in the %s chat format, train.bin %llu tokens, val.bin %llu tokens, "
            "%llu of them loss targets (train.mask, val.mask); BPE vocabulary %d (%s, copied into the "
            "folder)\n",
            c->out, (unsigned long long)st.n_docs, c->jsonl, fsdp_chat_format_names[st.chat_format],
            (unsigned long long)st.n_train, (unsigned long long)st.n_val, (unsigned long long)st.n_loss,
            st.vocab, c->tokenizer);
    else if (s == FSDP_OK && !c->tokenizer)
        printf("prepared %s: %llu documents from %d file%s, train.bin %llu tokens, val.bin %llu tokens, "
               "byte-level vocabulary %d (256 = end of text)\n",
               c->out, (unsigned long long)st.n_docs, c->n_texts, c->n_texts == 1 ? "" : "s",
               (unsigned long long)st.n_train, (unsigned long long)st.n_val, FSDP_BYTE_VOCAB);
    else if (s == FSDP_OK)
        printf("prepared %s: %llu documents from %d file%s, train.bin %llu tokens, val.bin %llu tokens, "
               "BPE vocabulary %d (%s, copied into the folder); encoded %.2f MB in %.3f s = %.1f MB/s\n",
               c->out, (unsigned long long)st.n_docs, c->n_texts, c->n_texts == 1 ? "" : "s",
               (unsigned long long)st.n_train, (unsigned long long)st.n_val, st.vocab, c->tokenizer,
               (double)st.text_bytes / 1e6, st.encode_s,
               (double)st.text_bytes / 1e6 / (st.encode_s > 0 ? st.encode_s : 1e-9));
    return s;
}

int main(int argc, char **argv) {
    /* Idle OpenMP threads sleep unless OMP_WAIT_POLICY says otherwise: spinning ones steal the cores
     * that working threads and other ranks need (docs/TRAINER.md, "Threads"). May re-execute. */
    fsdp_train_omp_wait_default(argv);
    fsdp_train_config cfg;
    fsdp_status ps = fsdp_train_config_parse(&cfg, argc, argv);
    char parse_msg[1024];
    snprintf(parse_msg, sizeof parse_msg, "%s", fsdp_last_error());

    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (ps == FSDP_OK) cc.timeout_s = cfg.comm_timeout;
    cc.stuck_exit = exit_code(FSDP_ETIMEOUT); /* a rank stuck inside MPI ends as a timed-out one does */
    fsdp_status s = fsdp_comm_init(&comm, &cc, &argc, &argv);
    if (s != FSDP_OK) {
        report(s, 0, 1, -1);
        return 1;
    }
    int rank = fsdp_comm_rank(comm), world = fsdp_comm_size(comm), code = 0;
    char unknown[512]; /* a misspelled knob would be ignored without a word (FSDP_STRICT_ENV=1: an error) */
    const int n_unknown = rank == 0 ? fsdp_env_unknown(unknown, sizeof unknown) : 0;
    if (n_unknown)
        fprintf(stderr,
                "fsdp-train: warning: unknown FSDP_* variable%s %s, ignored (docs/ENV.md lists the knobs; "
                "FSDP_STRICT_ENV=1 makes this an error)\n",
                n_unknown > 1 ? "s" : "", unknown);

    if (ps != FSDP_OK) { /* every rank parsed the same words: every rank ends here */
        if (rank == 0) fprintf(stderr, "fsdp-train: %s\n", parse_msg);
        code = 2;
    } else if (cfg.help) {
        if (rank == 0) fsdp_train_usage(stdout, cfg.cmd);
    } else {
        const int single = cfg.cmd == FSDP_CMD_PREPARE || cfg.cmd == FSDP_CMD_EXPORT;
        switch (cfg.cmd) {
        case FSDP_CMD_TRAIN:
            s = cfg.plan ? fsdp_train_plan(&cfg, comm, stdout) : fsdp_train_run(&cfg, comm, stdout, NULL);
            break;
        case FSDP_CMD_SAMPLE: s = fsdp_sample_run(&cfg, comm, stdout); break;
        /* single-process commands: rank 0 does them under a launcher */
        case FSDP_CMD_PREPARE: s = rank == 0 ? prepare(&cfg) : FSDP_OK; break;
        case FSDP_CMD_EXPORT: s = rank == 0 ? fsdp_export_run(&cfg, stdout) : FSDP_OK; break;
        default: s = FSDP_EINVAL; break;
        }
        /* Standard output is an output too: a full disk under `> log` is an error, not a lost log. */
        if (s == FSDP_OK && rank == 0 && (fflush(stdout) != 0 || ferror(stdout)))
            s = fsdp_set_error(FSDP_EIO, "cannot write the standard output: %s", strerror(errno));
        /* Agreement: a failure every rank knows of (fsdp_comm_agree) ends with MPI_Finalize on every
         * rank, the same exit code and one message. Ranks that are fine, and a single-process command's
         * rank 0 (the others did nothing), agree once more here; a rank that failed alone elsewhere may
         * have left the others inside a collective, so only an abort can end that job. */
        int agreed = world == 1 || agreed_failure(comm, s);
        if (!agreed && (s == FSDP_OK || single)) {
            s = fsdp_comm_agree(comm, s,
                                cfg.cmd == FSDP_CMD_TRAIN ? "the run" : fsdp_train_cmd_name(cfg.cmd));
            agreed = s == FSDP_OK || agreed_failure(comm, s);
        }
        if (s != FSDP_OK) {
            fsdp_status failed = s; /* another rank's failure: exit as that rank does */
            if (s == FSDP_EPEER) fsdp_comm_agreed_failure(comm, &failed);
            code = exit_code(failed);
            /* an abort follows: its deadline runs from here, so the message below cannot hold the
             * process on a full output pipe (a launcher daemon that stopped reading) */
            if (!agreed) fsdp_comm_abort_arm(comm, code);
            report(s, rank, world, agreed && world > 1 ? fsdp_comm_agreed_failure(comm, NULL) : -1);
            if (!agreed) fsdp_comm_abort(comm, code);
        }
    }
    fflush(stdout);
    fsdp_comm_free(comm);
    return code;
}

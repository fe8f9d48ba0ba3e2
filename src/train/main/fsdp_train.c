/* fsdp_train.c — main() of `fsdp-train`: parses the command line, starts the communicator (MPI under
 * mpirun, else a world of one), runs the command and turns its status into a message and an exit code
 * (0 fine, 2 bad command line, 1 anything else). All the work lives in the fsdp_train library. */
#include "fsdp.h"
#include "train/config.h"
#include "train/data.h"
#include "train/train.h"

#include <stdio.h>
#include <string.h>

static int report(fsdp_status s, int rank, int world) {
    const char *msg = fsdp_last_error();
    /* A rank that only learned of another rank's failure stays quiet unless it is rank 0. */
    if (rank == 0 || strstr(msg, "(its message says why)") == NULL) {
        if (world > 1)
            fprintf(stderr, "fsdp-train: [rank %d] error: %s\n", rank, msg[0] ? msg : fsdp_strerror(s));
        else
            fprintf(stderr, "fsdp-train: error: %s\n", msg[0] ? msg : fsdp_strerror(s));
    }
    return 1;
}

static fsdp_status prepare(const fsdp_train_config *c) {
    fsdp_prepare_args a = {.texts = c->texts,
                           .n_texts = c->n_texts,
                           .out_dir = c->out,
                           .val_fraction = c->val_fraction,
                           .doc_sep = c->doc_sep,
                           .tokenizer = c->tokenizer};
    fsdp_prepare_stats st;
    fsdp_status s = fsdp_prepare(&a, &st);
    if (s == FSDP_OK && !c->tokenizer)
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
    fsdp_train_config cfg;
    fsdp_status ps = fsdp_train_config_parse(&cfg, argc, argv);
    char parse_msg[1024];
    snprintf(parse_msg, sizeof parse_msg, "%s", fsdp_last_error());

    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (ps == FSDP_OK) cc.timeout_s = cfg.comm_timeout;
    fsdp_status s = fsdp_comm_init(&comm, &cc, &argc, &argv);
    if (s != FSDP_OK) return report(s, 0, 1);
    int rank = fsdp_comm_rank(comm), world = fsdp_comm_size(comm), code = 0;

    if (ps != FSDP_OK) {
        if (rank == 0) fprintf(stderr, "fsdp-train: %s\n", parse_msg);
        code = 2;
    } else if (cfg.help) {
        if (rank == 0) fsdp_train_usage(stdout, cfg.cmd);
    } else {
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
        if (s != FSDP_OK) code = report(s, rank, world);
    }
    fflush(stdout);
    /* Failures that every rank agreed on end normally; a rank failing alone would leave the others
     * waiting in a collective, so a multi-rank failure ends the whole job. */
    if (code == 1 && world > 1) fsdp_comm_abort(comm, 1);
    fsdp_comm_free(comm);
    return code;
}

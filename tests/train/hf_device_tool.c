/* hf_device_tool.c — the C side of tests/train/hf_device.sh: loads a Hugging Face folder (fsdp_hf_load)
 * into the same model on three engines, on the CPU, on the simulated device and on the simulated device
 * that claims memory the host cannot address (FSDP_SIM_NO_HOST_ACCESS: the loader writes through host
 * chunks and the device's copies), and compares every tensor (fsdp_unit_gather_tensor) with the CPU
 * engine's, bit for bit. Under mpirun each rank loads its own shard.
 * usage: hf_device_tool DIR   exit 0: every tensor the same on every device */
#include "fsdp.h"
#include "fsdp_model.h"
#include "core/device.h"
#include "train/hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ND 3

static fsdp_status load(fsdp_comm_t *comm, fsdp_device_t *dev, const char *dir, const fsdp_model_config *mc,
                        fsdp_engine_t **eng, fsdp_model_t **m) {
    fsdp_engine_config ec = fsdp_engine_config_default();
    ec.device = dev;
    fsdp_status s = fsdp_engine_init(eng, comm, &ec);
    if (s == FSDP_OK) s = fsdp_model_init(m, *eng, mc);
    if (s == FSDP_OK) s = fsdp_hf_load(*eng, dir, mc, NULL);
    return s;
}

int main(int argc, char **argv) {
    fsdp_comm_t *comm = NULL;
    fsdp_comm_config cc = fsdp_comm_config_default();
    if (fsdp_comm_init(&comm, &cc, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "hf_device_tool: %s\n", fsdp_last_error());
        return 1;
    }
    int rank = fsdp_comm_rank(comm);
    if (argc != 2) {
        fprintf(stderr, "usage: hf_device_tool DIR\n");
        return 2;
    }
    fsdp_model_config mc;
    fsdp_device_t *devs[ND] = {NULL, NULL, NULL};
    fsdp_engine_t *eng[ND] = {NULL, NULL, NULL};
    fsdp_model_t *m[ND] = {NULL, NULL, NULL};
    fsdp_status s = fsdp_hf_model_config(argv[1], &mc);
    if (s == FSDP_OK) s = fsdp_device_sim_create(3 + (uint64_t)rank, 0, &devs[1]);
    if (s == FSDP_OK) s = fsdp_device_sim_create(7 + (uint64_t)rank, FSDP_SIM_NO_HOST_ACCESS, &devs[2]);
    for (int d = 0; d < ND && s == FSDP_OK; d++)
        s = load(comm, devs[d], argv[1], &mc, &eng[d], &m[d]);
    long tensors = 0, elems = 0, differ = 0;
    for (int i = 0; s == FSDP_OK && i < fsdp_engine_num_units(eng[0]); i++) {
        for (int t = 0; s == FSDP_OK && t < fsdp_unit_num_tensors(fsdp_engine_unit(eng[0], i)); t++) {
            fsdp_tensor_info ti;
            s = fsdp_unit_tensor_info(fsdp_engine_unit(eng[0], i), t, &ti);
            if (s != FSDP_OK || ti.alias_of >= 0) continue;
            float *a = malloc(ti.numel * sizeof(float)), *b = malloc(ti.numel * sizeof(float));
            if (!a || !b) {
                fprintf(stderr, "hf_device_tool: out of memory\n");
                return 1;
            }
            s = fsdp_unit_gather_tensor(fsdp_engine_unit(eng[0], i), t, a, -1);
            for (int d = 1; d < ND && s == FSDP_OK; d++) {
                s = fsdp_unit_gather_tensor(fsdp_engine_unit(eng[d], i), t, b, -1);
                if (s == FSDP_OK && memcmp(a, b, ti.numel * sizeof(float)) != 0) {
                    differ++;
                    fprintf(stderr, "[rank %d] FAIL %s.%s differs on device %d\n", rank,
                            fsdp_unit_name(fsdp_engine_unit(eng[0], i)), ti.name, d);
                }
            }
            tensors++;
            elems += (long)ti.numel;
            free(a);
            free(b);
        }
    }
    if (s != FSDP_OK) fprintf(stderr, "[rank %d] FAIL: %s\n", rank, fsdp_last_error());
    if (s == FSDP_OK && rank == 0)
        printf("hf_device: %ld tensors, %ld elements: %s on the simulated devices\n", tensors, elems,
               differ ? "DIFFERENT" : "the same");
    for (int d = 0; d < ND; d++) {
        fsdp_model_free(m[d]);
        fsdp_engine_free(eng[d]);
    }
    fsdp_device_sim_destroy(devs[1]);
    fsdp_device_sim_destroy(devs[2]);
    fsdp_comm_free(comm);
    return s == FSDP_OK && differ == 0 && tensors > 0 ? 0 : 1;
}

# The memory plan against one real training step of a small GPT model (bench_plan --measure exits 1
# unless master, optim, grad_shard, param_full and main_grad equal the plan to the byte, max over
# ranks), on 1, 2 and 3 ranks, under LAZY and EAGER main_grad and both accumulation modes, with two
# micro-batches (bf16; one f32 and one recompute case too), two steps (prefetch starts in the second)
# at the default overlap depth 2, and at depths 0, 1 (one step) and 3.
if(TARGET bench_plan)
  foreach(np 1 2 3)
    add_test(NAME shard/plan_gpt/np${np} COMMAND sh -c
      "set -e; for a in '--main-grad lazy --accum sharded' '--main-grad lazy --accum no_sync' '--main-grad eager --accum sharded' '--main-grad eager --accum no_sync' '--compute f32 --recompute 1' '--max-inflight 0' '--max-inflight 1 --steps 1' '--max-inflight 3 --strategy shard_grad_op'; do '${FSDP_MPIRUN}' ${np} $<TARGET_FILE:bench_plan> --measure --layers 2 --embd 64 --heads 4 --vocab 300 --seq 32 --batch 2 --micro 2 $a; done")
    set_tests_properties(shard/plan_gpt/np${np} PROPERTIES LABELS "mpi;shard" TIMEOUT 300)
  endforeach()
endif()

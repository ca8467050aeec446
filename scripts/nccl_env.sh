# Sourced by the multi-GPU scripts (dp_check.sh, train8b_check.sh): NCCL as
# dist/nccl.h finds it (DFLASH_NCCL_LIB, else PyTorch's nvidia-nccl wheel on
# the GPU machine), NVLink multicast off (NCCL_NVLS_ENABLE=0), and
# ngpu: the GPUs this process may use (CUDA_VISIBLE_DEVICES when set).
export NCCL_NVLS_ENABLE=0
if [ -z "${DFLASH_NCCL_LIB:-}" ]; then
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)
    [ -n "$nccl" ] && export DFLASH_NCCL_LIB=$nccl/lib/libnccl.so.2
fi
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && ngpu=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | wc -l)

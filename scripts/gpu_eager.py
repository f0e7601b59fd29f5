#!/usr/bin/env python3
"""PyTorch eager (transformers) throughput on the GPU, the other side of scripts/gpu_check.sh's ratios.

    gpu_eager.py qa       CHECKPOINT DTYPE BATCH   features/s: forward passes over [BATCH, 384] token ids
    gpu_eager.py generate CHECKPOINT DTYPE BATCH   tokens/s: greedy generate() of 64 new tokens after
                                                   prompts of 32 tokens, BATCH prompts at a time

DTYPE is fp16 or bf16. Prints the one number on stdout. Token ids are random (the checkpoints are
make-model's random weights); the shapes are those of the evalrun runs it is compared with.
"""
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoModelForQuestionAnswering

SEQ = 384                 # QA window, as task.max_seq_length
PROMPT, NEW = 32, 64      # generation, as task.fixed_prompt_length and task.max_new_tokens


def timed(fn, repeats):
    fn()  # warm-up: kernels chosen, memory allocated
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeats


def main():
    kind, path, dtype, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        if kind == "qa":
            model = AutoModelForQuestionAnswering.from_pretrained(path, torch_dtype=dt).to("cuda").eval()
            vocab = model.config.vocab_size
            ids = torch.randint(4, vocab, (batch, SEQ), generator=gen).to("cuda")
            mask = torch.ones_like(ids)
            seconds = timed(lambda: model(input_ids=ids, attention_mask=mask), 20 if batch == 1 else 5)
            print(f"{batch / seconds:.2f}")
        else:
            model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dt).to("cuda").eval()
            vocab = model.config.vocab_size
            ids = torch.randint(4, vocab, (batch, PROMPT), generator=gen).to("cuda")
            mask = torch.ones_like(ids)

            def run():
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW,
                               do_sample=False, pad_token_id=0)
            seconds = timed(run, 2)
            print(f"{batch * NEW / seconds:.1f}")


if __name__ == "__main__":
    main()

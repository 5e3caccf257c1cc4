# A GPU job's work: bf16 matrix products on GPU 0 for the given seconds.
import sys, time, torch
secs = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
t = time.time()
while time.time() - t < secs:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()

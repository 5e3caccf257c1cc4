# A GPU job that holds memory on GPU 0 and does nothing: seconds, then GiB.
import sys, time, torch
x = torch.empty(int(float(sys.argv[2]) * (1 << 30)), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(float(sys.argv[1]))

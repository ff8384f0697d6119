# A first program for the cluster: it runs in a hardened container with no network.
import platform
import sys

print(f"hello from python {platform.python_version()} in the sandbox")
print("the sum of 1..100 is", sum(range(1, 101)))
sys.exit(0)

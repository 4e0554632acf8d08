import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)  # python/: its gradcomp/ has no built extension
# Test the installed package, even when pytest runs from python/ (`python -m` puts the working
# directory first on sys.path); dist_util is imported from here.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != SOURCE]
sys.path.insert(0, HERE)

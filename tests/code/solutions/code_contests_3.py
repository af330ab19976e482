# Written for the areal tests (the data set has no reference solutions): stdin -> stdout.
import sys
from collections import Counter
def main():
    data = sys.stdin.read().split()
    n = int(data[0]); a = data[1:1+n]; b = data[1+n:1+2*n]
    c = Counter(a)
    unmatched = 0
    for s in b:
        if c[s] > 0: c[s] -= 1
        else: unmatched += 1
    print(unmatched)
main()

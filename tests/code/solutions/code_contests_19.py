# Written for the areal tests (the data set has no reference solutions): stdin -> stdout.
import sys
def main():
    data = sys.stdin.buffer.read().split(); t = int(data[0]); p = 1; out = []
    for _ in range(t):
        a, b, q = int(data[p]), int(data[p+1]), int(data[p+2]); p += 3
        period = a * b
        pre = [0] * (period + 1)
        for x in range(period):
            pre[x+1] = pre[x] + (1 if (x % a) % b != (x % b) % a else 0)
        def f(n):
            return (n // period) * pre[period] + pre[n % period + 1]
        res = []
        for _ in range(q):
            l, r = int(data[p]), int(data[p+1]); p += 2
            res.append(f(r) - f(l - 1))
        out.append(" ".join(map(str, res)))
    print("\n".join(out))
main()

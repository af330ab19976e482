# Written for the areal tests (the data set has no reference solutions): stdin -> stdout.
t = int(input())
for _ in range(t):
    x, y = map(int, input().split())
    print(min(x, y), max(x, y))

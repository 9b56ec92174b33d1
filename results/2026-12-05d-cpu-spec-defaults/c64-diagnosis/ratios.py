import re,math,sys
f=sys.argv[1]; base=sys.argv[2]; arms=sys.argv[3:]
d={}
for l in open(f):
    m=re.match(r'([a-z]+?)(\d+) ([\d.]+)',l)
    if m: d[(m[1],int(m[2]))]=float(m[3])
for arm in arms:
    r=[d[(arm,i)]/d[(base,i)] for i in range(1,50) if (arm,i) in d and (base,i) in d]
    g=math.exp(sum(map(math.log,r))/len(r)); sd=(sum((x-g)**2 for x in r)/(len(r)-1))**.5
    print(f'{arm}/{base}', len(r), ' '.join('%.3f'%x for x in r), '| geomean %.3f sd %.3f se %.3f'%(g,sd,sd/len(r)**.5))

// The CPU attention kernel's output loop (6 query rows x 64 dimensions, one FMA per key and
// lane, V rows 768 B apart as in SmolLM2's pool) on one core, as a share of the FMA peak of
// scripts/cpu_fma_peak.c (6.4 zmm FMAs/ns on the 2-vCPU Xeon). results/2026-12-05-cpu-attention-aligned:
// 77-85 % with V on 64-byte lines, 6-8 points less with V 16 bytes off (where a large Rust
// Vec starts), ~62 % when V walks 4,096 keys (L3). Build and run:
//   gcc -O3 -funroll-all-loops -mavx512f -o /tmp/pv scripts/cpu_pv_loop.c
//   /tmp/pv <chunks of 64 keys, 1..64> <V offset in floats: 0 aligned, 4 = 16 bytes off>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define STRIDE 192  /* floats between two keys' V rows: 3 KV heads x 64 */
#define PSTRIDE 4112
static float V[4096*STRIDE+64] __attribute__((aligned(64)));
static float P[66*PSTRIDE+64] __attribute__((aligned(64)));
static float O[66*64] __attribute__((aligned(64)));
static long vrow[4096];
__attribute__((noinline)) void pv6(const float*p0,int ps,float*o,const float*v,const long*vr,int k0,int k1){
  __m512 a[6][4];
  for(int r=0;r<6;r++)for(int j=0;j<4;j++)a[r][j]=_mm512_loadu_ps(o+r*64+16*j);
  for(int k=k0;k<k1;k++){
    const float*vp=v+vr[k];
    __m512 v0=_mm512_loadu_ps(vp),v1=_mm512_loadu_ps(vp+16),v2=_mm512_loadu_ps(vp+32),v3=_mm512_loadu_ps(vp+48);
    for(int r=0;r<6;r++){__m512 b=_mm512_set1_ps(p0[r*ps+k]);
      a[r][0]=_mm512_fmadd_ps(b,v0,a[r][0]);a[r][1]=_mm512_fmadd_ps(b,v1,a[r][1]);
      a[r][2]=_mm512_fmadd_ps(b,v2,a[r][2]);a[r][3]=_mm512_fmadd_ps(b,v3,a[r][3]);}
  }
  for(int r=0;r<6;r++)for(int j=0;j<4;j++)_mm512_storeu_ps(o+r*64+16*j,a[r][j]);
}
int main(int argc,char**argv){
  int chunks=argc>1?atoi(argv[1]):8, off=argc>2?atoi(argv[2]):0;
  if(chunks<1||chunks>64||off<0||off>15){fprintf(stderr,"usage: pv <chunks 1..64> <offset 0..15>\n");return 1;}
  for(int k=0;k<4096;k++)vrow[k]=(long)k*STRIDE;
  for(long i=0;i<4096L*STRIDE+64;i++)V[i]=1e-3f;
  for(long i=0;i<66L*PSTRIDE+64;i++)P[i]=1e-3f;
  long M=2000000;double t=now();
  // Key chunk outermost, 11 row groups of 6 reuse its V, as the kernel walks them.
  for(long n=0;n<M;n++){long c=(n/11)%chunks, g=n%11;
    pv6(P+off+g*6*PSTRIDE+c*64,PSTRIDE,O+g*6*64,V+off,vrow,c*64,c*64+64);}
  t=now()-t;
  printf("%d chunks, V offset %d B: %.1f%% of 6.4 FMA/ns (%g)\n",chunks,off*4,M*64.0*24/t/1e9/6.4*100,O[0]);
}

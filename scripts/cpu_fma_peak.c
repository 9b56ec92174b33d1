// The FMA peak of one core, 8 and 16 lanes (results/2026-12-05-cpu-prefill-simd: the ceiling the CPU
// attention kernels are measured against). Build and run:
//   gcc -O3 -mavx512f -mfma -o /tmp/fma scripts/cpu_fma_peak.c && /tmp/fma
// Twelve independent FMA chains a width (more than latency x ports), 200M iterations each.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  long N=200000000;
  {__m256 a[12];for(int i=0;i<12;i++)a[i]=_mm256_set1_ps(i*0.001f);__m256 b=_mm256_set1_ps(0.9999f),c=_mm256_set1_ps(0.0001f);
  double t=now();for(long n=0;n<N;n++){for(int i=0;i<12;i++)a[i]=_mm256_fmadd_ps(a[i],b,c);}
  t=now()-t;float s=0;for(int i=0;i<12;i++)s+=a[i][0];printf("ymm: %.2f GFMA-instr/s (%f)\n",N*12/t/1e9,s);}
  {__m512 a[12];for(int i=0;i<12;i++)a[i]=_mm512_set1_ps(i*0.001f);__m512 b=_mm512_set1_ps(0.9999f),c=_mm512_set1_ps(0.0001f);
  double t=now();for(long n=0;n<N;n++){for(int i=0;i<12;i++)a[i]=_mm512_fmadd_ps(a[i],b,c);}
  t=now()-t;float s=0;for(int i=0;i<12;i++)s+=a[i][0];printf("zmm: %.2f GFMA-instr/s (%f)\n",N*12/t/1e9,s);}
}

// Throughput of AMX-BF16 tile products on one core (results/2026-12-05-cpu-prefill-bf16: the tile
// products are ~5 % of the bf16 prompt-attention kernel's time). Build and run:
//   gcc -O2 -mamx-tile -mamx-bf16 -o /tmp/amx scripts/cpu_amx_peak.c && /tmp/amx
// Four independent 16x16 f32 accumulators, A and B held in tiles (no loads in the loop).
#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  // Linux grants the tile data state per process: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA).
  long r=syscall(SYS_arch_prctl,0x1023,18);
  printf("AMX permission: %s\n",r==0?"granted":"refused");
  if(r!=0)return 1;
  struct __attribute__((packed)){unsigned char palette,start;unsigned char res[14];unsigned short colsb[16];unsigned char rows[16];} cfg;
  memset(&cfg,0,sizeof cfg);cfg.palette=1;
  for(int i=0;i<8;i++){cfg.colsb[i]=64;cfg.rows[i]=16;}
  _tile_loadconfig(&cfg);
  static short A[16*32] __attribute__((aligned(64))),B[16*32] __attribute__((aligned(64)));
  static float C[256] __attribute__((aligned(64)));
  for(int i=0;i<512;i++){A[i]=0x3f80;B[i]=0x3c00;}
  _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
  _tile_loadd(4,A,64);_tile_loadd(5,B,64);_tile_loadd(6,A,64);_tile_loadd(7,B,64);
  long M=20000000;double t=now();
  for(long n=0;n<M;n++){_tile_dpbf16ps(0,4,5);_tile_dpbf16ps(1,4,7);_tile_dpbf16ps(2,6,5);_tile_dpbf16ps(3,6,7);}
  t=now()-t;_tile_stored(0,C,64);_tile_release();
  printf("tdpbf16ps: %.2f ns each, %.0f G bf16 MAC/s (%g)\n",t*1e9/(M*4.0),M*4*16.0*16*32/t/1e9,C[0]);
}

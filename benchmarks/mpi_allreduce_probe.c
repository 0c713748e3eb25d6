/* MPI_Allreduce bandwidth between the ranks of one job: for each size
 * (default 1, 4 and 16 MiB of floats), a warm-up call, then REPS timed
 * calls in place, each after a barrier, and REPS one-way transfers of the
 * same bytes from rank 1 to rank 0; rank 0 prints one line per size,
 * "allreduce <bytes> <median ms> <Mbit/s> <one-way Mbit/s>", preceded by one
 * "rank" line per rank (its host, network namespace and allowed CPUs, to
 * show where it ran).
 *
 * Mbit/s is bytes / median time: the bus bandwidth of nccl-tests, which for
 * two ranks is what each rank sends (and receives) per second whatever the
 * algorithm (ring: two halves; recursive doubling: the whole buffer), so it
 * is comparable with the link's rate in each direction, as the one-way
 * figure is.
 *
 * Built by benchmarks/netns_link.py with mpicc; run as
 *   mpirun -np 2 mpi_allreduce_probe [REPS [MiB...]]                        */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The median over ranks' slowest time per repetition: a transfer ends when
 * the last rank is done. Sorts `times`. */
static double median_of_slowest(double* times, int reps) {
  MPI_Allreduce(MPI_IN_PLACE, times, reps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  qsort(times, (size_t)reps, sizeof *times, compare_doubles);
  return times[reps / 2];
}

/* The CPUs this process may run on, from /proc/self/status. */
static void allowed_cpus(char* out, size_t n) {
  char line[256];
  FILE* f = fopen("/proc/self/status", "r");
  snprintf(out, n, "?");
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Cpus_allowed_list: %63s", out) == 1) break;
  if (f) fclose(f);
}

/* Every rank's host name, network namespace and allowed CPUs, printed by
 * rank 0 in rank order. */
static void report_placement(int rank, int size) {
  char here[256] = "", ns[64] = "", cpus[64];
  gethostname(here, 128);
  if (readlink("/proc/self/ns/net", ns, sizeof ns - 1) < 0) strcpy(ns, "?");
  allowed_cpus(cpus, sizeof cpus);
  snprintf(here + strlen(here), sizeof here - strlen(here), " %s cpus %s", ns, cpus);
  char* all = rank == 0 ? malloc((size_t)size * sizeof here) : NULL;
  MPI_Gather(here, sizeof here, MPI_CHAR, all, sizeof here, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int r = 0; rank == 0 && r < size; ++r) printf("rank %d %s\n", r, all + r * sizeof here);
  free(all);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  report_placement(rank, size);
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1) reps = 1;
  static const int default_mib[] = {1, 4, 16};
  int count = argc > 2 ? argc - 2 : 3;
  double* times = malloc((size_t)reps * sizeof *times);
  for (int s = 0; s < count; ++s) {
    const int mib = argc > 2 ? atoi(argv[s + 2]) : default_mib[s];
    const size_t n = (size_t)mib << 18; /* floats in mib MiB */
    float* buf = malloc(n * sizeof *buf);
    for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[r] = MPI_Wtime() - t0;
    }
    const double median = median_of_slowest(times, reps);
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (rank == 1) MPI_Send(buf, (int)n, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
      if (rank == 0) MPI_Recv(buf, (int)n, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      times[r] = MPI_Wtime() - t0;
    }
    const double one_way = median_of_slowest(times, reps);
    const double bits = (double)n * sizeof *buf * 8;
    if (rank == 0)
      printf("allreduce %.0f %.3f %.1f %.1f\n", bits / 8, median * 1e3, bits / median / 1e6,
             bits / one_way / 1e6);
    free(buf);
  }
  free(times);
  MPI_Finalize();
  return 0;
}

// What the doctor names beside the limit it finds (doctor.cc): facts of the run that cost
// data or GPU time whatever limits the throughput.
#pragma once

#include "headrace/observe/doctor.h"
#include "headrace/observe/report.h"

namespace headrace {

// Samples the packer left out or cut (data lost, counted as errors by kind), and the key
// that decides them.
void AddPackLoss(const RunReport& r, Diagnosis& d);

// batch.balance: the share of every rank's step idled at the barrier for the slowest
// rank, as dealt and as the order dealt it; advice when it costs more than the trainer's
// wait for data.
void AddImbalance(const RunReport& r, Diagnosis& d);

}  // namespace headrace

#include "headrace/exec/rows_gate.h"

#include <gtest/gtest.h>

#include "headrace/exec/delivery.h"

namespace headrace {
namespace {

TEST(BatchRowsGate, TellsDrawOnTheBatchsEstimateFirstAndOnlyThePastIsCharged) {
  BudgetGauge gauge;
  std::stop_source stop;
  DeliveryOptions o;
  o.total_batches = 1;
  o.batches_per_epoch = 1;
  auto d = Delivery::Make(Schedule::kSequential, o, gauge, stop);
  ASSERT_EQ(d->NextToStart(), 0);
  ASSERT_TRUE(d->Admit(0, 1000, 4));  // 400 of it the estimate of its rows
  BatchRowsGate gate;
  gate.Start(d.get(), 0, 400);
  gate.Hold(150);
  gate.Hold(200);
  EXPECT_EQ(gate.charged(), 0);
  EXPECT_EQ(gauge.used(), 1000);
  gate.Hold(120);  // 50 left of the estimate
  EXPECT_EQ(gate.charged(), 70);
  gate.Hold(30);
  EXPECT_EQ(gate.charged(), 100);
  EXPECT_EQ(gauge.used(), 1100);
  d->Ready(0, Batch{}, 1000 + gate.charged(), 900);  // assembled: what it holds
  EXPECT_EQ(gauge.used(), 900);
}

}  // namespace
}  // namespace headrace

// Collectives and point-to-point over any Communicator, compared against
// values each rank computes on its own. Values are small integers, exact in
// every dtype (bf16 included), so results are compared exactly.
#include "tests/parallel/communicator_suite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "engine/check.h"
#include "engine/device.h"

using engine::DeviceType;
using engine::DType;
using engine::Tensor;
using parallel::CommHandle;
using parallel::Communicator;
using parallel::P2POp;
using parallel::ReduceOp;

namespace parallel_test {

std::vector<CommUnderTest>& comms_under_test() {
  static std::vector<CommUnderTest> comms;
  return comms;
}

std::vector<parallel::Communicator*>& pipeline_comms() {
  static std::vector<parallel::Communicator*> comms;
  return comms;
}

TestTensor::TestTensor(DType dtype, std::int64_t n, DeviceType device)
    : buffer_(device, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * engine::dtype_size(dtype)),
      tensor_(buffer_.as_tensor(engine::Shape{n}, dtype)) {}

void TestTensor::set(const std::vector<double>& values) {
  const std::int64_t n = tensor_.numel();
  EXPECT_EQ(static_cast<std::int64_t>(values.size()), n);
  std::vector<unsigned char> host(tensor_.bytes());
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    switch (tensor_.dtype()) {
      case DType::kF32: reinterpret_cast<float*>(host.data())[i] = static_cast<float>(v); break;
      case DType::kF64: reinterpret_cast<double*>(host.data())[i] = v; break;
      case DType::kI32: reinterpret_cast<std::int32_t*>(host.data())[i] = static_cast<std::int32_t>(v); break;
      case DType::kBF16:  // the test values are exact in bf16: truncation is exact
        reinterpret_cast<std::uint16_t*>(host.data())[i] =
            static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(v)) >> 16);
        break;
    }
  }
  engine::copy_bytes(tensor_.data(), tensor_.device(), host.data(), DeviceType::kCpu, tensor_.bytes());
}

std::vector<double> TestTensor::get() const {
  const std::int64_t n = tensor_.numel();
  std::vector<unsigned char> host(tensor_.bytes());
  engine::copy_bytes(host.data(), DeviceType::kCpu, tensor_.data(), tensor_.device(), tensor_.bytes());
  std::vector<double> out(n);
  for (std::int64_t i = 0; i < n; ++i) {
    switch (tensor_.dtype()) {
      case DType::kF32: out[i] = reinterpret_cast<const float*>(host.data())[i]; break;
      case DType::kF64: out[i] = reinterpret_cast<const double*>(host.data())[i]; break;
      case DType::kI32: out[i] = reinterpret_cast<const std::int32_t*>(host.data())[i]; break;
      case DType::kBF16:
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(reinterpret_cast<const std::uint16_t*>(host.data())[i])
                                      << 16);
        break;
    }
  }
  return out;
}

namespace {

const DType kAllDtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32};

std::vector<double> values(std::int64_t n, const std::function<double(std::int64_t)>& f) {
  std::vector<double> v(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = f(i);
  return v;
}

class CommunicatorTest : public ::testing::TestWithParam<CommUnderTest> {
 protected:
  Communicator& comm() const { return *GetParam().comm; }
  DeviceType device() const { return GetParam().device; }
  int n() const { return comm().size(); }
  int r() const { return comm().rank(); }
  TestTensor make(DType dtype, std::int64_t count) const { return TestTensor(dtype, count, device()); }
};

TEST_P(CommunicatorTest, AllReduceSum) {
  for (DType dtype : kAllDtypes) {
    for (std::int64_t count : {1, 1000}) {
      SCOPED_TRACE(std::string(engine::dtype_name(dtype)) + " x " + std::to_string(count));
      TestTensor t = make(dtype, count);
      t.set(values(count, [&](std::int64_t i) { return (r() + 1) + i % 5; }));
      comm().all_reduce(t.tensor(), ReduceOp::kSum);
      // sum over ranks q of (q + 1) + i % 5
      const std::vector<double> want = values(count, [&](std::int64_t i) { return n() * (n() + 1) / 2.0 + n() * (i % 5); });
      EXPECT_EQ(t.get(), want);
    }
  }
}

TEST_P(CommunicatorTest, AllReduceMax) {
  auto v = [](int rank, std::int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 11) - 5; };
  for (DType dtype : kAllDtypes) {
    SCOPED_TRACE(engine::dtype_name(dtype));
    TestTensor t = make(dtype, 37);
    t.set(values(37, [&](std::int64_t i) { return v(r(), i); }));
    comm().all_reduce(t.tensor(), ReduceOp::kMax);
    EXPECT_EQ(t.get(), values(37, [&](std::int64_t i) {
                double m = v(0, i);
                for (int q = 1; q < n(); ++q) m = std::max(m, v(q, i));
                return m;
              }));
  }
}

TEST_P(CommunicatorTest, ReduceScatter) {
  const std::int64_t c = 5;
  auto v = [](int rank, std::int64_t j) { return static_cast<double>((rank + 2 * j) % 9); };
  auto want = [&](std::int64_t i) {
    double s = 0;
    for (int q = 0; q < n(); ++q) s += v(q, r() * c + i);
    return s;
  };
  for (DType dtype : kAllDtypes) {
    SCOPED_TRACE(engine::dtype_name(dtype));
    TestTensor in = make(dtype, n() * c), out = make(dtype, c);
    in.set(values(n() * c, [&](std::int64_t j) { return v(r(), j); }));
    comm().reduce_scatter(in.tensor(), out.tensor());
    EXPECT_EQ(out.get(), values(c, want));
    // The input is untouched.
    EXPECT_EQ(in.get(), values(n() * c, [&](std::int64_t j) { return v(r(), j); }));

    // In place: out is this rank's slice of in (ZeRO's usage).
    in.set(values(n() * c, [&](std::int64_t j) { return v(r(), j); }));
    comm().reduce_scatter(in.tensor(), in.tensor().flat_slice(r() * c, c));
    const std::vector<double> all = in.get();
    EXPECT_EQ(std::vector<double>(all.begin() + r() * c, all.begin() + (r() + 1) * c), values(c, want));
  }
}

TEST_P(CommunicatorTest, AllGather) {
  const std::int64_t c = 7;
  auto v = [](int rank, std::int64_t i) { return static_cast<double>(rank * 16 + i); };
  const std::vector<double> want = values(n() * c, [&](std::int64_t k) { return v(static_cast<int>(k / c), k % c); });
  for (DType dtype : kAllDtypes) {
    SCOPED_TRACE(engine::dtype_name(dtype));
    TestTensor in = make(dtype, c), out = make(dtype, n() * c);
    in.set(values(c, [&](std::int64_t i) { return v(r(), i); }));
    out.set(std::vector<double>(n() * c, -1.0));
    comm().all_gather(in.tensor(), out.tensor());
    EXPECT_EQ(out.get(), want);

    // In place: in is this rank's slice of out.
    std::vector<double> mine(n() * c, -1.0);
    for (std::int64_t i = 0; i < c; ++i) mine[r() * c + i] = v(r(), i);
    out.set(mine);
    comm().all_gather(out.tensor().flat_slice(r() * c, c), out.tensor());
    EXPECT_EQ(out.get(), want);
  }
}

TEST_P(CommunicatorTest, BroadcastFromEveryRoot) {
  for (DType dtype : kAllDtypes) {
    for (int root = 0; root < n(); ++root) {
      SCOPED_TRACE(std::string(engine::dtype_name(dtype)) + " root " + std::to_string(root));
      TestTensor t = make(dtype, 11);
      auto v = [&](std::int64_t i) { return root * 3.0 + i % 4; };
      t.set(r() == root ? values(11, v) : std::vector<double>(11, -1.0));
      comm().broadcast(t.tensor(), root);
      EXPECT_EQ(t.get(), values(11, v));
    }
  }
}

TEST_P(CommunicatorTest, SendRecvRing) {
  const int next = (r() + 1) % n(), prev = (r() + n() - 1) % n();
  for (DType dtype : kAllDtypes) {
    SCOPED_TRACE(engine::dtype_name(dtype));
    auto v = [](int from, std::int64_t i) { return from * 10.0 + i; };
    // Batched: the send to next and the receive from prev progress together,
    // so a ring cannot deadlock even with unbuffered sends.
    TestTensor out = make(dtype, 9), in = make(dtype, 9);
    out.set(values(9, [&](std::int64_t i) { return v(r(), i); }));
    const P2POp ops[] = {P2POp::send(out.tensor(), next), P2POp::recv(in.tensor(), prev)};
    comm().batch_p2p(ops);
    EXPECT_EQ(in.get(), values(9, [&](std::int64_t i) { return v(prev, i); }));

    // Asynchronous, waited in the opposite order. On NCCL two separate calls
    // run one after the other on the communicator's stream, so a ring of
    // receive-then-send would wait forever (as it would in NCCL itself):
    // there the pair is one asynchronous batch.
    in.set(std::vector<double>(9, -1.0));
    if (std::string(comm().backend()) == "nccl") {
      CommHandle pair = comm().batch_p2p_async(ops);
      pair->wait();
      pair->wait();  // idempotent
    } else {
      CommHandle recv = comm().recv_async(in.tensor(), prev);
      CommHandle send = comm().send_async(out.tensor(), next);
      recv->wait();
      send->wait();
      send->wait();  // idempotent
    }
    EXPECT_EQ(in.get(), values(9, [&](std::int64_t i) { return v(prev, i); }));

    // Blocking pairs (rank ^ 1): the lower rank sends first, the other
    // receives first, so rendezvous sends cannot deadlock.
    if (n() % 2 == 0) {
      const int partner = r() ^ 1;
      in.set(std::vector<double>(9, -1.0));
      if (r() < partner) {
        comm().send(out.tensor(), partner);
        comm().recv(in.tensor(), partner);
      } else {
        comm().recv(in.tensor(), partner);
        comm().send(out.tensor(), partner);
      }
      EXPECT_EQ(in.get(), values(9, [&](std::int64_t i) { return v(partner, i); }));
    }
  }
}

TEST_P(CommunicatorTest, AllToAll) {
  const std::int64_t c = 3;
  // Block j of rank q's input, element i: q * 8 + j + 64 i (exact in bf16 for n <= 8).
  auto v = [](int q, int j, std::int64_t i) { return q * 8.0 + j + 64.0 * i; };
  for (DType dtype : kAllDtypes) {
    SCOPED_TRACE(engine::dtype_name(dtype));
    TestTensor in = make(dtype, n() * c), out = make(dtype, n() * c);
    in.set(values(n() * c, [&](std::int64_t k) { return v(r(), static_cast<int>(k / c), k % c); }));
    comm().all_to_all(in.tensor(), out.tensor());
    // Block j of my output is block r() of rank j's input.
    EXPECT_EQ(out.get(), values(n() * c, [&](std::int64_t k) { return v(static_cast<int>(k / c), r(), k % c); }));
  }
}

TEST_P(CommunicatorTest, AsyncCollectivesOverlap) {
  const std::int64_t c = 4;
  TestTensor a = make(DType::kF32, 100), rs_in = make(DType::kF32, n() * c), rs_out = make(DType::kF32, c);
  TestTensor ag_in = make(DType::kBF16, c), ag_out = make(DType::kBF16, n() * c), b = make(DType::kI32, 6);
  a.set(values(100, [&](std::int64_t i) { return r() + i; }));
  rs_in.set(values(n() * c, [&](std::int64_t j) { return static_cast<double>(j); }));
  ag_in.set(values(c, [&](std::int64_t i) { return r() * 4.0 + i; }));
  b.set(values(6, [&](std::int64_t i) { return r() == 0 ? 7.0 * i : 0.0; }));

  // All four in flight at once (same order on every rank), completed in reverse.
  CommHandle h1 = comm().all_reduce_async(a.tensor());
  CommHandle h2 = comm().reduce_scatter_async(rs_in.tensor(), rs_out.tensor());
  CommHandle h3 = comm().all_gather_async(ag_in.tensor(), ag_out.tensor());
  CommHandle h4 = comm().broadcast_async(b.tensor(), 0);
  h4->wait();
  h3->wait();
  h2->wait();
  h1->wait();

  EXPECT_EQ(a.get(), values(100, [&](std::int64_t i) { return n() * (n() - 1) / 2.0 + n() * i; }));
  EXPECT_EQ(rs_out.get(), values(c, [&](std::int64_t i) { return static_cast<double>(n() * (r() * c + i)); }));
  EXPECT_EQ(ag_out.get(), values(n() * c, [&](std::int64_t k) { return (k / c) * 4.0 + k % c; }));
  EXPECT_EQ(b.get(), values(6, [&](std::int64_t i) { return 7.0 * i; }));

  // A handle dropped without wait() completes in its destructor.
  a.set(std::vector<double>(100, 1.0));
  { CommHandle dropped = comm().all_reduce_async(a.tensor()); }
  EXPECT_EQ(a.get(), std::vector<double>(100, static_cast<double>(n())));
}

TEST_P(CommunicatorTest, ByteCounters) {
  // The ring volumes documented in communicator.h, recomputed here.
  const std::uint64_t N = n();
  const std::int64_t c = 6;
  TestTensor big = make(DType::kF32, 1000), rs_in = make(DType::kF32, n() * c), rs_out = make(DType::kF32, c);
  TestTensor bf = make(DType::kBF16, 10), a2a_in = make(DType::kI32, n() * c), a2a_out = make(DType::kI32, n() * c);
  comm().barrier();
  comm().reset_bytes_sent();
  EXPECT_EQ(comm().bytes_sent(), 0u);
  std::uint64_t want = 0;

  comm().all_reduce(big.tensor());
  want += 2 * (N - 1) * 4000 / N;
  EXPECT_EQ(comm().bytes_sent(), want);

  comm().reduce_scatter(rs_in.tensor(), rs_out.tensor());
  want += (N - 1) * c * 4;
  EXPECT_EQ(comm().bytes_sent(), want);

  comm().all_gather(rs_out.tensor(), rs_in.tensor());
  want += (N - 1) * c * 4;
  EXPECT_EQ(comm().bytes_sent(), want);

  comm().broadcast(bf.tensor(), 0);  // bf16 counts 2 bytes per element
  want += (N - 1) * 20 / N;
  EXPECT_EQ(comm().bytes_sent(), want);

  comm().all_to_all(a2a_in.tensor(), a2a_out.tensor());
  want += (N - 1) * (n() * c * 4) / N;
  EXPECT_EQ(comm().bytes_sent(), want);

  // A send counts its bytes, a receive nothing, a message to myself nothing.
  const int next = (r() + 1) % n(), prev = (r() + n() - 1) % n();
  TestTensor landing = make(DType::kF32, 1000);
  const P2POp ring[] = {P2POp::send(big.tensor(), next), P2POp::recv(landing.tensor(), prev)};
  comm().batch_p2p(ring);
  want += n() > 1 ? 4000 : 0;
  EXPECT_EQ(comm().bytes_sent(), want);

  comm().barrier();
  EXPECT_EQ(comm().bytes_sent(), want);
  comm().reset_bytes_sent();
  EXPECT_EQ(comm().bytes_sent(), 0u);
}

TEST_P(CommunicatorTest, WaitSecondsCountBlockedTime) {
  // Rank 1 sleeps before it sends; rank 0, already in a blocking recv, waits
  // that long. Then the same through an asynchronous handle dropped without
  // wait(): its destructor's wait counts too. A size-1 group counts nothing.
  constexpr double kSleep = 0.2, kAtLeast = 0.15;
  TestTensor t = make(DType::kF32, 16);
  comm().barrier();
  comm().reset_wait_seconds();
  EXPECT_EQ(comm().wait_seconds(), 0.0);
  if (n() == 1) {
    comm().all_reduce(t.tensor());
    comm().barrier();
    TestTensor landing = make(DType::kF32, 16);
    t.set(values(16, [](std::int64_t i) { return 3.0 + i; }));
    landing.set(values(16, [](std::int64_t) { return -1.0; }));
    const P2POp self[] = {P2POp::send(t.tensor(), 0), P2POp::recv(landing.tensor(), 0)};
    comm().batch_p2p(self);  // a message to myself: a local copy, nobody to wait for
    EXPECT_EQ(comm().wait_seconds(), 0.0);
    EXPECT_EQ(landing.get(), t.get()) << "the message to myself did not land";
    // Two messages to myself land in order; a send without its receive is refused.
    TestTensor a = make(DType::kF32, 8), b = make(DType::kF32, 8), ra = make(DType::kF32, 8),
               rb = make(DType::kF32, 8);
    a.set(values(8, [](std::int64_t i) { return 1.0 + i; }));
    b.set(values(8, [](std::int64_t i) { return 100.0 + i; }));
    const P2POp two[] = {P2POp::send(a.tensor(), 0), P2POp::send(b.tensor(), 0), P2POp::recv(ra.tensor(), 0),
                         P2POp::recv(rb.tensor(), 0)};
    comm().batch_p2p(two);
    EXPECT_EQ(ra.get(), a.get());
    EXPECT_EQ(rb.get(), b.get());
    // A receive waited for before its send is posted would wait forever in
    // MPI: an error here; the later send completes it.
    ra.set(std::vector<double>(8, -1.0));
    CommHandle early = comm().recv_async(ra.tensor(), 0);
    EXPECT_THROW(early->wait(), engine::Error);
    comm().send(b.tensor(), 0);
    early->wait();
    EXPECT_EQ(ra.get(), b.get());
    return;
  }
  if (std::string(comm().backend()) == "nccl")
    GTEST_SKIP() << "NCCL's wait() orders the compute stream after the transfer; the host does not block "
                    "(parallel/communicator.h, \"Time accounting\")";
  for (bool blocking : {true, false}) {
    comm().barrier();
    comm().reset_wait_seconds();
    if (r() == 1) {
      std::this_thread::sleep_for(std::chrono::duration<double>(kSleep));
      comm().send(t.tensor(), 0);
    } else if (r() == 0) {
      if (blocking) {
        comm().recv(t.tensor(), 1);
      } else {
        CommHandle pending = comm().recv_async(t.tensor(), 1);
        pending->progress();  // never blocks, counts nothing
      }  // dropped: waits in its destructor
      EXPECT_GE(comm().wait_seconds(), kAtLeast) << (blocking ? "blocking recv" : "dropped handle");
      EXPECT_LT(comm().wait_seconds(), 10.0);
    }
  }
  comm().reset_wait_seconds();
  EXPECT_EQ(comm().wait_seconds(), 0.0);
  comm().barrier();
}

TEST_P(CommunicatorTest, BadArgumentsThrowBeforeCommunicating) {
  // Every rank throws the same error without sending anything, so the group
  // stays in step.
  TestTensor f = make(DType::kF32, n() * 2 + 1), g = make(DType::kF32, 2), h = make(DType::kI32, 2);
  EXPECT_THROW(comm().reduce_scatter(f.tensor(), g.tensor()), engine::Error);
  EXPECT_THROW(comm().all_gather(g.tensor(), f.tensor()), engine::Error);
  EXPECT_THROW(comm().all_gather(g.tensor(), h.tensor()), engine::Error);
  EXPECT_THROW(comm().broadcast(g.tensor(), n()), engine::Error);
  EXPECT_THROW(comm().send(g.tensor(), -1), engine::Error);
  EXPECT_THROW(comm().recv(g.tensor(), n()), engine::Error);
  EXPECT_THROW(comm().all_to_all(f.tensor(), f.tensor()), engine::Error);
  try {
    comm().reduce_scatter(f.tensor(), g.tensor());
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find(comm().name() + " reduce_scatter"), std::string::npos) << e.what();
  }
  comm().barrier();
}

TEST_P(CommunicatorTest, EmptyTensorsAreNoOps) {
  TestTensor e = make(DType::kF32, 0), big = make(DType::kF32, 0);
  comm().all_reduce(e.tensor());
  comm().broadcast(e.tensor(), 0);
  comm().all_gather(e.tensor(), big.tensor());
  // An empty message is still a message: it matches its receive.
  const P2POp ops[] = {P2POp::send(e.tensor(), (r() + 1) % n()), P2POp::recv(big.tensor(), (r() + n() - 1) % n())};
  comm().batch_p2p(ops);
  comm().barrier();
}

std::string label_of(const ::testing::TestParamInfo<CommUnderTest>& info) { return info.param.label; }

INSTANTIATE_TEST_SUITE_P(Comms, CommunicatorTest, ::testing::ValuesIn(comms_under_test()), label_of);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CommunicatorTest);

}  // namespace

}  // namespace parallel_test

// The `train` program: flags (or a JSON config) in, a trained GPT out.
// Every error is printed with its rank and ends the process non-zero.
#include <CLI/CLI.hpp>
#include <iostream>

#include "engine/check.h"
#include "engine/device.h"
#include "launch/train_config.h"
#include "launch/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"Train a GPT-2 style model on token shards (llm.c format)."};
  launch::TrainConfig config;
  launch::add_train_options(app, config);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    config.resolve(config.device == "cpu" ? 0 : engine::cuda_device_count());
    launch::Trainer trainer(config, std::cout);
    trainer.run();
  } catch (const std::exception& e) {
    std::cerr << "[rank 0] error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}

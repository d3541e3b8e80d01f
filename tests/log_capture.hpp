#pragma once

// What lockstep logs while a log_capture lives, readable while other
// threads still log.

#include "runtime/log.hpp"

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

class log_capture {
public:
  log_capture() { lockstep::detail::logger().sinks().push_back(sink_); }
  ~log_capture() { std::erase(lockstep::detail::logger().sinks(), sink_); }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;

  std::string text() const { return sink_->text(); }

private:
  class sink : public spdlog::sinks::base_sink<std::mutex> {
  public:
    std::string text() {
      std::lock_guard lock(this->mutex_);
      return text_;
    }

  protected:
    void sink_it_(const spdlog::details::log_msg& message) override {
      spdlog::memory_buf_t formatted;
      this->formatter_->format(message, formatted);
      text_.append(formatted.data(), formatted.size());
    }
    void flush_() override {}

  private:
    std::string text_;
  };

  std::shared_ptr<sink> sink_ = std::make_shared<sink>();
};

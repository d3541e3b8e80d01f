// LOCKSTEP_FAULT (runtime/fault_injection.hpp): a malformed value is a
// value_error naming the variable; a valid one arms its phase alone and
// counts arrivals. The kills and stops themselves are exercised by the
// multi-worker test, on worker processes.

#include "runtime/fault_injection.hpp"

#include "lockstep/error.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

using lockstep::detail::fault_point;

TEST_CASE("malformed LOCKSTEP_FAULT values are refused naming the variable, then a valid one arms") {
  // The variable is read on the first call that parses it: a refused value
  // leaves it unread, so each case here is read afresh.
  for (const char* bad : {"agree", "join:kill", "agree:pause", "agree:kill:0", "agree:kill:x",
                          "all-gather:stop:-1", ":kill"}) {
    CAPTURE(std::string(bad));
    ::setenv("LOCKSTEP_FAULT", bad, 1);
    try {
      fault_point("agree");
      FAIL("accepted");
    } catch (const lockstep::value_error& e) {
      const std::string text = e.what();
      CHECK(text.find("LOCKSTEP_FAULT must be <phase>:<kill|stop>[:<n>]") != std::string::npos);
      CHECK(text.find(std::string("got '") + bad + "'") != std::string::npos);
    }
  }
  // Armed for the third arrival at fan-out: other phases, and the first two
  // arrivals, pass (the third would stop this process).
  ::setenv("LOCKSTEP_FAULT", "fan-out:stop:3", 1);
  for (int i = 0; i < 5; ++i) {
    fault_point("agree");
    fault_point("reduce-scatter");
    fault_point("all-gather");
  }
  fault_point("fan-out");
  fault_point("fan-out");
  ::unsetenv("LOCKSTEP_FAULT");
}

// librdkafka (Debian: librdkafka-dev), with the in-process mock cluster the unit tests and the demo use.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

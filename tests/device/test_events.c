/* Streams and events on the host devices, including manual completion. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "device_test.h"

static void streams_are_distinct(void **state)
{
    const char *spec = *state;
    vr_device *dev = open_or_fail(spec);
    vr_stream a, b;
    assert_int_equal(vr_stream_create(dev, &a), VR_OK);
    assert_int_equal(vr_stream_create(dev, &b), VR_OK);
    assert_true(a != 0 && b != 0 && a != b);
    vr_stream_destroy(dev, a);
    vr_stream_destroy(dev, b);
    vr_device_close(dev);
}

static void events_complete_at_once_by_default(void **state)
{
    const char *spec = *state;
    vr_device *dev = open_or_fail(spec);
    vr_event *ev;
    assert_int_equal(vr_event_record(dev, 0, &ev), VR_OK);
    assert_true(vr_event_query(dev, ev));
    assert_int_equal(vr_event_sync(dev, ev), VR_OK);
    assert_int_equal(vr_device_synchronize(dev), VR_OK);
    vr_device_close(dev);
}

static void manual_events_wait_for_completion(void **state)
{
    const char *spec = *state;
    vr_device *dev = open_or_fail(spec);
    vr_stream s;
    assert_int_equal(vr_stream_create(dev, &s), VR_OK);
    vr_device_set_manual_events(dev, true);

    vr_event *e1, *e2, *e3, *e4;
    assert_int_equal(vr_event_record(dev, s, &e1), VR_OK);
    assert_int_equal(vr_event_record(dev, 0, &e2), VR_OK);
    assert_false(vr_event_query(dev, e1));
    assert_false(vr_event_query(dev, e2));
    vr_device_complete_events(dev);
    assert_true(vr_event_query(dev, e1));
    assert_true(vr_event_query(dev, e2));

    /* Syncing an event completes it and everything recorded before it. */
    assert_int_equal(vr_event_record(dev, s, &e3), VR_OK);
    assert_int_equal(vr_event_record(dev, s, &e4), VR_OK);
    vr_event_destroy(dev, e1);
    assert_int_equal(vr_event_record(dev, s, &e1), VR_OK);
    assert_int_equal(vr_event_sync(dev, e3), VR_OK);
    assert_false(vr_event_query(dev, e4));
    assert_false(vr_event_query(dev, e1));
    assert_int_equal(vr_device_synchronize(dev), VR_OK);
    assert_true(vr_event_query(dev, e4));
    assert_true(vr_event_query(dev, e1));

    /* Turning manual mode off completes whatever is pending. */
    vr_event *e5;
    assert_int_equal(vr_event_record(dev, s, &e5), VR_OK);
    assert_false(vr_event_query(dev, e5));
    vr_device_set_manual_events(dev, false);
    assert_true(vr_event_query(dev, e5));

    vr_event_destroy(dev, e1);
    vr_event_destroy(dev, e2);
    vr_event_destroy(dev, e4);
    vr_event_destroy(dev, e5);
    vr_event_destroy(dev, NULL);
    vr_stream_destroy(dev, s);
    vr_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(streams_are_distinct, "cpu"),
        cmocka_unit_test_prestate(streams_are_distinct, "meta"),
        cmocka_unit_test_prestate(events_complete_at_once_by_default, "cpu"),
        cmocka_unit_test_prestate(events_complete_at_once_by_default, "meta"),
        cmocka_unit_test_prestate(manual_events_wait_for_completion, "cpu"),
        cmocka_unit_test_prestate(manual_events_wait_for_completion, "meta"),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Streams and events of the host backends (cpu, meta).
 *
 * Work on these devices is synchronous, so a stream is just a distinct id and
 * an event is complete as soon as it is recorded, unless manual completion is
 * on (vr_device_set_manual_events): then an event stays pending until
 * vr_device_complete_events(), vr_event_sync() on it or a later event, or
 * vr_device_synchronize(). Events carry a sequence number; every event with
 * seq <= host.completed is done, which keeps each operation O(1). */
#include "device/device_impl.h"

#include <stdlib.h>

struct vr_event {
    uint64_t seq;
    vr_stream stream;
};

vr_status vr__host_stream_create(vr_device *dev, vr_stream *out)
{
    pthread_mutex_lock(&dev->lock);
    *out = (vr_stream)dev->host.next_stream++;
    pthread_mutex_unlock(&dev->lock);
    return VR_OK;
}

void vr__host_stream_destroy(vr_device *dev, vr_stream s)
{
    (void)dev;
    (void)s;
}

vr_status vr__host_event_record(vr_device *dev, vr_stream s, vr_event **out)
{
    vr_event *ev = malloc(sizeof *ev);
    if (!ev)
        return vr_error(VR_ERR_OOM, "device %s: no host memory for an event", dev->name);
    pthread_mutex_lock(&dev->lock);
    ev->seq = ++dev->host.recorded;
    ev->stream = s;
    if (!dev->host.manual)
        dev->host.completed = dev->host.recorded;
    dev->host.live_events++;
    pthread_mutex_unlock(&dev->lock);
    *out = ev;
    return VR_OK;
}

bool vr__host_event_query(vr_device *dev, vr_event *ev)
{
    pthread_mutex_lock(&dev->lock);
    bool done = ev->seq <= dev->host.completed;
    pthread_mutex_unlock(&dev->lock);
    return done;
}

vr_status vr__host_event_sync(vr_device *dev, vr_event *ev)
{
    pthread_mutex_lock(&dev->lock);
    if (dev->host.completed < ev->seq)
        dev->host.completed = ev->seq;
    pthread_mutex_unlock(&dev->lock);
    vr__host_event_destroy(dev, ev);
    return VR_OK;
}

void vr__host_event_destroy(vr_device *dev, vr_event *ev)
{
    pthread_mutex_lock(&dev->lock);
    dev->host.live_events--;
    pthread_mutex_unlock(&dev->lock);
    free(ev);
}

vr_status vr__host_synchronize(vr_device *dev)
{
    vr_device_complete_events(dev);
    return VR_OK;
}

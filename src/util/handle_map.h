// ncclmpi: a map from MPI handles (requests, messages: pointers in Open MPI, integers in MPICH) to
// small values, for tables that a Wait or Test consults on every call: open addressing with linear
// probing in one array (no allocation per entry, one or two cache lines per lookup), deletion by
// shifting the following entries back (no tombstones). Not thread-safe: callers lock.
#ifndef NM_UTIL_HANDLE_MAP_H
#define NM_UTIL_HANDLE_MAP_H
#include <stddef.h>
#include <stdint.h>

#include <utility>
#include <vector>

namespace ncclmpi {

template <class K, class V>
class HandleMap {
  public:
    // `none`: a handle never stored (MPI_REQUEST_NULL), which marks a free slot.
    explicit HandleMap(K none) : none_(none) {}
    size_t size() const { return n_; }
    V *find(K k)
    {
        if (n_ == 0 || k == none_) return nullptr;
        for (size_t i = slot(k);; i = (i + 1) & mask_) {
            if (s_[i].first == k) return &s_[i].second;
            if (s_[i].first == none_) return nullptr;
        }
    }
    // The value of k, inserted (value-initialised) when absent.
    V &operator[](K k)
    {
        if ((n_ + 1) * 2 > s_.size()) grow();
        size_t i = slot(k);
        for (; s_[i].first != none_; i = (i + 1) & mask_)
            if (s_[i].first == k) return s_[i].second;
        s_[i].first = k;
        s_[i].second = V{};
        n_++;
        return s_[i].second;
    }
    bool erase(K k)
    {
        if (n_ == 0 || k == none_) return false;
        size_t i = slot(k);
        for (; s_[i].first != k; i = (i + 1) & mask_)
            if (s_[i].first == none_) return false;
        // shift back each following entry of the run that its home slot allows into the hole
        for (size_t j = (i + 1) & mask_; s_[j].first != none_; j = (j + 1) & mask_) {
            const size_t home = slot(s_[j].first);
            if (((j - home) & mask_) >= ((j - i) & mask_)) {
                s_[i] = std::move(s_[j]);
                i = j;
            }
        }
        s_[i].first = none_;
        n_--;
        return true;
    }
    template <class F>
    void for_each(F f)
    {
        for (auto &e : s_)
            if (e.first != none_) f(e.first, e.second);
    }

  private:
    size_t slot(K k) const
    {
        uint64_t h = (uint64_t)(uintptr_t)k * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
        return (size_t)(h >> 32) & mask_;
    }
    void grow()
    {
        std::vector<std::pair<K, V>> old(s_.empty() ? 16 : s_.size() * 2, std::pair<K, V>(none_, V{}));
        old.swap(s_);
        mask_ = s_.size() - 1;
        n_ = 0;
        for (auto &e : old)
            if (e.first != none_) (*this)[e.first] = std::move(e.second);
    }

    K none_;
    std::vector<std::pair<K, V>> s_;
    size_t mask_ = 0;
    size_t n_ = 0;
};

}  // namespace ncclmpi
#endif
